"""One exporter page (Prometheus text format) -> the samples a snapshot needs, grouped by role.

Uses `prometheus_client.parser.text_string_to_metric_families`. That parser stops at the first
malformed line, so a page that fails is parsed again line by line: bad lines are skipped and
counted (the caller logs once per target), good lines kept. Samples are routed by family:
DCGM families keyed by GPU (UUID + MIG instance), `training_steps_total` by pod,
kube-state-metrics families as label rows; everything else is ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from observer.catalog import (
    BY_NAME,
    LABEL_MIG_INSTANCE,
    LABEL_NAMESPACE,
    LABEL_POD,
    LABEL_UUID,
    STEPS_METRIC,
    canonical_name,
)
from observer.prom_queries import KSM_FAMILIES, KSM_STATUS_FAMILIES

KUBE_NAMES = frozenset((*KSM_FAMILIES, *KSM_STATUS_FAMILIES))
DCGM_PREFIXES = ("DCGM_FI_", "DCGM_EXP_")


@dataclass(slots=True)
class ParsedPage:
    """Samples of one page. GPU keys are `UUID` or `UUID/GPU_I_ID`."""

    identity: dict[str, Mapping[str, str]] = field(default_factory=dict)
    """GPU key -> the labels of its first DCGM series on the page."""
    gpu: dict[str, tuple[list[str], list[float], list[float | None]]] = field(default_factory=dict)
    """Family (catalog name) -> (GPU keys, values, explicit timestamps or None)."""
    steps: list[tuple[str, str, float]] = field(default_factory=list)
    kube: list[tuple[str, dict[str, str], float]] = field(default_factory=list)
    samples: int = 0
    malformed: int = 0
    first_error: str = ""


def gpu_key(labels: Mapping[str, str]) -> str:
    uuid = labels.get(LABEL_UUID, "")
    mig = labels.get(LABEL_MIG_INSTANCE, "")
    return f"{uuid}/{mig}" if mig else uuid


def _samples(text: str) -> Iterable[tuple[str, dict[str, str], float, float | None]]:
    """(name, labels, value, explicit timestamp in seconds or None)."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            ts = s.timestamp
            name = s.name
            if family.type == "counter" and name.endswith("_total") and name[:-6] in BY_NAME:
                name = name[:-6]  # the parser adds `_total`; dcgm-exporter's names lack it
            yield name, s.labels, s.value, None if ts is None else float(ts)


def _add(
    page: ParsedPage, name: str, labels: dict[str, str], value: float, ts: float | None
) -> None:
    page.samples += 1
    if name.startswith(DCGM_PREFIXES):
        uuid = labels.get(LABEL_UUID)
        if not uuid:
            return
        key = gpu_key(labels)
        if key not in page.identity:
            page.identity[key] = labels
        keys, values, stamps = page.gpu.setdefault(canonical_name(name), ([], [], []))
        keys.append(key)
        values.append(value)
        stamps.append(ts)
    elif name == STEPS_METRIC:
        page.steps.append((labels.get(LABEL_NAMESPACE, ""), labels.get(LABEL_POD, ""), value))
    elif name in KUBE_NAMES:
        page.kube.append((name, labels, value))


def parse_page(text: str) -> ParsedPage:
    """Parse a whole page; on a malformed line fall back to line-by-line parsing."""
    page = ParsedPage()
    try:
        for name, labels, value, ts in _samples(text):
            _add(page, name, labels, value, ts)
        return page
    except (ValueError, TypeError, IndexError) as exc:
        first = f"{type(exc).__name__}: {exc}"
    page = ParsedPage(first_error=first)
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            parsed = list(_samples(stripped + "\n"))
        except (ValueError, TypeError, IndexError) as exc:
            page.malformed += 1
            if page.malformed == 1:
                page.first_error = f"{type(exc).__name__}: {exc} (line {stripped[:80]!r})"
            continue
        for name, labels, value, ts in parsed:
            _add(page, name, labels, value, ts)
    return page
