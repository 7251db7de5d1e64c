"""One exporter page (Prometheus text format) -> the samples a snapshot needs, grouped by role.

Label blocks are parsed with `prometheus_client.parser.text_string_to_metric_families`,
memoised per label set (see `PageParser`); each line stands alone, so a malformed line is
skipped and counted (the caller logs once per target) and the rest of the page is kept.
Samples are routed by family: DCGM families keyed by GPU (UUID + MIG instance),
`training_steps_total` by pod, kube-state-metrics families as label rows; the rest is ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from observer.fleet.catalog import (
    BY_NAME,
    LABEL_MIG_INSTANCE,
    LABEL_NAMESPACE,
    LABEL_POD,
    LABEL_UUID,
    LABEL_XID,
    STEPS_METRIC,
    XID_COUNT_METRIC,
    canonical_name,
    xid_count_column,
)
from observer.snapshot.kube_records import KSM_FAMILIES, KSM_GPU_FAMILIES, KSM_STATUS_FAMILIES

KUBE_NAMES = frozenset((*KSM_FAMILIES, *KSM_STATUS_FAMILIES, *KSM_GPU_FAMILIES))
DCGM_PREFIXES = ("DCGM_FI_", "DCGM_EXP_")
LABEL_VGPU = "vgpu"
"""dcgm-exporter's replica label on a time-sliced GPU's per-pod series (KUBERNETES_VIRTUAL_GPUS)."""


@dataclass(slots=True)
class ParsedPage:
    """Samples of one page. GPU keys are `UUID` or `UUID/GPU_I_ID`."""

    identity: dict[str, Mapping[str, str]] = field(default_factory=dict)
    """GPU key -> the labels of its first DCGM series on the page."""
    gpu: dict[str, tuple[list[str], list[float], list[float | None]]] = field(default_factory=dict)
    """Family (catalog name) -> (GPU keys, values, explicit timestamps or None)."""
    steps: list[tuple[str, str, float]] = field(default_factory=list)
    kube: list[tuple[str, dict[str, str], float]] = field(default_factory=list)
    sharers: dict[str, list[Mapping[str, str]]] = field(default_factory=dict)
    """GPU key -> label sets of its other virtual-GPU series (`vgpu`: one per pod sharing a
    time-sliced GPU), one per pod, beside the identity's (observer.snapshot.gpu_sharing)."""
    xid: dict[str, dict[str, float]] = field(default_factory=dict)
    """GPU key -> XID code -> count ("" for the zero series without `xid`), folded into
    `gpu` by `finish`."""
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
        family = canonical_name(name)
        if family == XID_COUNT_METRIC:
            # One series per code (and one per pod sharing the GPU, with `vgpu`): a code's
            # count is the GPU's, never a sum over the pods that see it.
            codes = page.xid.setdefault(key, {})
            code = labels.get(LABEL_XID, "")
            codes[code] = max(codes.get(code, 0.0), value)
            return
        if key not in page.identity:
            page.identity[key] = labels
        elif LABEL_VGPU in labels:
            _add_sharer(page, key, labels)
        keys, values, stamps = page.gpu.setdefault(family, ([], [], []))
        keys.append(key)
        values.append(value)
        stamps.append(ts)
    elif name == STEPS_METRIC:
        page.steps.append((labels.get(LABEL_NAMESPACE, ""), labels.get(LABEL_POD, ""), value))
    elif name in KUBE_NAMES:
        page.kube.append((name, labels, value))


def _add_sharer(page: ParsedPage, key: str, labels: Mapping[str, str]) -> None:
    vgpu = labels[LABEL_VGPU]
    if page.identity[key].get(LABEL_VGPU) == vgpu:
        return
    known = page.sharers.setdefault(key, [])
    if all(other[LABEL_VGPU] != vgpu for other in known):
        known.append(labels)


def _finish_xid(page: ParsedPage) -> None:
    """XID counts as columns: the GPU's total, and one column per code (`xid_count_column`)."""
    for key, codes in page.xid.items():
        for code, v in [("", sum(codes.values())), *((c, v) for c, v in codes.items() if c)]:
            name = xid_count_column(code) if code else XID_COUNT_METRIC
            keys, values, stamps = page.gpu.setdefault(name, ([], [], []))
            keys.append(key)
            values.append(v)
            stamps.append(None)


def parse_page(text: str) -> ParsedPage:
    """Parse a whole page with the prometheus_client parser (no cache); see `PageParser`."""
    return PageParser(cache_size=0).parse(text)


class PageParser:
    """Line by line, with the prometheus_client parser memoised per label set.

    prometheus_client's parser costs ~0.2 ms per sample with dcgm-exporter's ten labels; a page
    repeats the same label set for each of a GPU's ~22 families, and every scrape repeats the
    page. So each line is split into name, `{labels}` and value; the label block is parsed by
    `text_string_to_metric_families` the first time it is seen and then reused (bounded cache,
    cleared when full). A line the parser rejects, or whose value is not a number, is skipped
    and counted.
    """

    def __init__(self, cache_size: int = 200_000) -> None:
        self.cache_size = cache_size
        self._labels: dict[str, dict[str, str]] = {}

    def _parse_line(self, line: str) -> tuple[str, dict[str, str], float, float | None]:
        brace = line.find("{")
        if brace >= 0:
            close = line.rindex("}")
            name, block, rest = line[:brace], line[brace : close + 1], line[close + 1 :]
        else:
            name, _, rest = line.partition(" ")
            block = ""
        parts = rest.split()
        if not name or not parts or len(parts) > 2:
            raise ValueError(f"not `name{{labels}} value [timestamp]`: {line[:80]!r}")
        labels = self._labels.get(block) if block else {}
        if labels is None:
            parsed = list(_samples(f"m{block} 0\n"))
            labels = parsed[0][1]
            if len(self._labels) >= self.cache_size:
                self._labels.clear()
            if self.cache_size:
                self._labels[block] = labels
        try:
            value = float(parts[0])
        except ValueError:
            value = float(next(iter(_samples(line + "\n")))[2])  # the parser's number forms
        ts = float(parts[1]) / 1000.0 if len(parts) == 2 else None
        return name, labels, value, ts

    def parse(self, text: str) -> ParsedPage:
        page = ParsedPage()
        for line in text.splitlines():
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            try:
                name, labels, value, ts = self._parse_line(stripped)
            except (ValueError, TypeError, IndexError) as exc:
                page.malformed += 1
                if page.malformed == 1:
                    page.first_error = f"{type(exc).__name__}: {exc} (line {stripped[:80]!r})"
                continue
            _add(page, name, labels, value, ts)
        _finish_xid(page)
        return page
