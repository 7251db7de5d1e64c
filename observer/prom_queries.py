"""The PromQL of one Prometheus collection cycle: a fixed plan, independent of fleet size.

Every cycle asks the same ~17 queries whatever the fleet holds (10 GPUs or 100k), and each query
does its filtering and label stripping on the server so the payload stays close to "one number
per GPU per metric":

- `identity`: one row per GPU label set with its sample time (`timestamp()` on the bare
  selector, the only form where Prometheus returns the sample's own time). Only the labels the
  snapshot uses are kept (`max by (...)`), accepting `Hostname` and `hostname` and MIG labels.
- `vanished`: GPUs seen within the inventory window but absent now (XID 79, exporter down past
  the lookback), valued by when they were last seen: a lost GPU is a row with NaN metrics rather
  than missing, and its node's last-sample age stays known.
- `values`: every gauge (and error-counter totals, only where non-zero) in one query, keyed by
  UUID (+ `GPU_I_ID`) and a `gf` label that carries the family name; restricted to each GPU's
  *newest* label set, because backfilled data has no staleness markers and an old pod's series
  lingers for the lookback delta.
- one `increase(...[w])` per counter family (reset-aware on the server); error counters come back
  only where they rose (`> 0`), the rest is filled with 0 for GPUs that report.
- `families`: which families exist at all (tiny), so absent means "not collected", not 0.
- the XID count only where its own sample is the GPU's newest (dcgm-exporter drops the
  series when its window empties; without staleness markers it would linger), then
  training steps and their increase, `up`, the scrape interval (sample spacing of
  one GPU per node) and kube-state-metrics (two queries).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from observer.catalog import (
    LABEL_GPU,
    LABEL_HOSTNAME,
    LABEL_HOSTNAME_NEW,
    LABEL_MIG_INSTANCE,
    LABEL_MIG_PROFILE,
    LABEL_MODEL,
    LABEL_NAMESPACE,
    LABEL_PCI_BUS_ID,
    LABEL_POD,
    LABEL_UUID,
    METRICS,
    STEPS_METRIC,
    XID_COUNT_METRIC,
    Kind,
)
from observer.job_identity import DEFAULT_JOB_LABEL_KEYS

FAMILY_LABEL = "gf"
"""Label that carries a series' family name through aggregations (which drop `__name__`)."""
IDENTITY_LABELS = (
    LABEL_UUID,
    LABEL_MIG_INSTANCE,
    LABEL_MIG_PROFILE,
    LABEL_GPU,
    LABEL_MODEL,
    LABEL_HOSTNAME,
    LABEL_HOSTNAME_NEW,
    LABEL_PCI_BUS_ID,
    LABEL_POD,
    LABEL_NAMESPACE,
)
KEY = f"{LABEL_UUID}, {LABEL_MIG_INSTANCE}"
SPARSE_COUNTERS = (
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
)
"""Error counters: zero on a healthy GPU, so only the GPUs where they are non-zero come back."""
EXTRA_GAUGES = (
    "DCGM_FI_DEV_ROW_REMAP_PENDING",
    "DCGM_FI_DEV_RETIRED_SBE",
    "DCGM_FI_DEV_RETIRED_DBE",
    "DCGM_FI_DEV_RETIRED_PENDING",
)
"""Fields outside dcgm-exporter's defaults that the detectors read when a user enables them."""
KSM_FAMILIES = (
    "kube_pod_info",
    "kube_pod_labels",
    "kube_node_info",
    "kube_node_labels",
    "kube_node_spec_unschedulable",
    "kube_node_spec_taint",
)
KSM_STATUS_FAMILIES = ("kube_pod_status_phase", "kube_node_status_condition")


@dataclass(frozen=True, slots=True)
class PromSettings:
    """How to talk to Prometheus and what to ask it. Passed in; nothing read from the env."""

    url: str
    timeout: float = 10.0
    """Seconds per HTTP request (also sent to Prometheus as the query `timeout`)."""
    retries: int = 2
    """Retries of a request on connection errors, read timeouts, 429 and 5xx."""
    backoff: float = 0.25
    """Backoff factor between retries (seconds, doubling; Retry-After is honoured)."""
    window: float = 120.0
    """Counter increase window (seconds); at least 2 scrape intervals."""
    inventory_window: float = 900.0
    """GPUs seen this long ago are still rows of the snapshot (with NaN metrics)."""
    inventory_step: float = 15.0
    """Resolution of the inventory subquery that finds when a vanished GPU was last seen."""
    inventory_metric: str = "DCGM_FI_DEV_FB_USED"
    """The family that enumerates GPUs (default-on, reported per MIG instance too)."""
    interval_window: float = 300.0
    up_selector: str = 'up{job=~".*dcgm.*"}'
    ksm_matchers: str = ""
    """Extra matchers for kube-state-metrics series, e.g. `job="kube-state-metrics"`."""
    job_label_keys: tuple[str, ...] = DEFAULT_JOB_LABEL_KEYS
    extra_gauges: tuple[str, ...] = EXTRA_GAUGES
    concurrency: int = 4
    range_chunk: float = 3600.0
    """Longest span of one range request; longer windows are split into chunks."""
    cluster: str = "default"
    headers: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    target_labels: tuple[str, ...] = ("job", "instance", "endpoint", "service", "prometheus")
    """Labels Prometheus adds on scrape; stripped from kube-state-metrics pod/node labels."""


@dataclass(frozen=True, slots=True)
class Query:
    name: str
    promql: str
    family: str = ""
    """For per-family queries (counter increases): the catalog family."""
    essential: bool = False
    """Without this answer there is no snapshot (CollectionError instead of degraded)."""


def _dur(seconds: float) -> str:
    return f"{round(seconds)}s"


def _names(names: Sequence[str]) -> str:
    return "|".join(names)


def _tag(selector: str) -> str:
    return f'label_replace({selector}, "{FAMILY_LABEL}", "$1", "__name__", "(.+)")'


def gauge_families(s: PromSettings) -> tuple[str, ...]:
    """Gauge series names asked for: catalog gauges, their aliases, the enabled extras."""
    out: list[str] = []
    for m in METRICS:
        if m.kind == Kind.GAUGE:
            out += [m.name, *m.aliases]
    return (*out, *s.extra_gauges)


def dense_counters() -> tuple[str, ...]:
    return tuple(
        m.name for m in METRICS if m.kind == Kind.COUNTER and m.name not in SPARSE_COUNTERS
    )


def counter_families() -> tuple[str, ...]:
    return tuple(m.name for m in METRICS if m.kind == Kind.COUNTER)


def newest_label_sets(inv: str) -> str:
    """Per GPU, the label set (pod, namespace) of its newest sample, valued by its time."""
    by = f"{KEY}, {LABEL_POD}, {LABEL_NAMESPACE}"
    return (
        f"(max by ({by}) (timestamp({inv})) == on ({KEY}) group_left "
        f"max by ({KEY}) (timestamp({inv})))"
    )


def interval_query(s: PromSettings) -> str:
    """Median sample spacing of one GPU per node: (newest - oldest sample time) / count.

    The oldest time comes from a fine subquery (it may be the sample just before the window, so
    the count is corrected by half a sample); it holds for data younger than the window too.
    """
    x = f'{s.inventory_metric}{{{LABEL_GPU}="0"}}'
    w = _dur(s.interval_window)
    return (
        f"quantile(0.5, (timestamp({x}) - min_over_time(timestamp({x})[{w}:5s])) / "
        f"(count_over_time({x}[{w}]) - 0.5))"
    )


def plan(s: PromSettings) -> tuple[Query, ...]:
    """The cycle's queries, in a fixed order (the count never depends on the fleet)."""
    inv = s.inventory_metric
    ident = ", ".join(IDENTITY_LABELS)
    newest = newest_label_sets(inv)
    on_newest = f"on ({KEY}, {LABEL_POD}, {LABEL_NAMESPACE}) {newest}"
    dense = _tag(f'{{__name__=~"{_names([*gauge_families(s), *dense_counters()])}"}}')
    sparse = f"({_tag(f'{{__name__=~{chr(34)}{_names(SPARSE_COUNTERS)}{chr(34)}}}')} > 0)"
    all_dcgm = _names([*gauge_families(s), *counter_families(), XID_COUNT_METRIC])
    w = _dur(s.window)
    queries = [
        Query("identity", f"max by ({ident}) (timestamp({inv}))", essential=True),
        Query(
            "vanished",
            f"max by ({ident}) (max_over_time(timestamp({inv})[{_dur(s.inventory_window)}:"
            f"{_dur(s.inventory_step)}])) unless on ({KEY}) {inv}",
        ),
        Query(
            "values",
            f"max by ({FAMILY_LABEL}, {KEY}) (({dense} or {sparse}) and {on_newest})",
        ),
        Query(
            "families",
            f"count by ({FAMILY_LABEL}) ({_tag(f'{{__name__=~{chr(34)}{all_dcgm}{chr(34)}}}')})",
        ),
    ]
    for name in counter_families():
        expr = f"sum by ({KEY}) (increase({name}[{w}]))"
        if name in SPARSE_COUNTERS:
            expr += " > 0"
        queries.append(Query(f"increase:{name}", expr, family=name))
    ksm = f",{s.ksm_matchers}" if s.ksm_matchers else ""
    queries += [
        Query(
            "xid_count",
            f"sum by ({KEY}) ({XID_COUNT_METRIC} and (timestamp({XID_COUNT_METRIC}) >= on ({KEY}) "
            f"group_left max by ({KEY}) (timestamp({inv}))))",
        ),
        Query("steps", f"max by ({LABEL_NAMESPACE}, {LABEL_POD}) ({STEPS_METRIC})"),
        Query(
            "steps_increase",
            f"sum by ({LABEL_NAMESPACE}, {LABEL_POD}) (increase({STEPS_METRIC}[{w}]))",
        ),
        Query("up", s.up_selector),
        Query("interval", interval_query(s)),
        Query("kube", f'{{__name__=~"{_names(KSM_FAMILIES)}"{ksm}}}'),
        Query("kube_status", f'{{__name__=~"{_names(KSM_STATUS_FAMILIES)}"{ksm}}} == 1'),
    ]
    return tuple(queries)
