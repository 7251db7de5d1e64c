"""The PromQL of one Prometheus collection cycle: a fixed plan, independent of fleet size.

Every cycle asks the same requests whatever the fleet holds (10 GPUs or 100k): 23 on a cold
start, 14 afterwards (the 9 `cold` ones are then answered from memory: the cold start's answers
for 3, observer.prometheus.memory for the 6 counter increases). Each does its
filtering and label stripping on the server, so the payload stays close to "one number per GPU
per metric", and the plan avoids reading any series twice where it can (Prometheus spends
~10 us per series read; at 10k GPUs x 22 families that is the cycle's main cost):

- `identity`: one row per GPU label set with its sample time (`timestamp()` on the bare
  selector, the only form where Prometheus returns the sample's own time). Only the labels the
  snapshot uses are kept (`max by (...)`), accepting `Hostname` and `hostname` and MIG labels.
- `vanished` (cold start): GPUs seen within the inventory window but absent now (XID 79,
  exporter down past the lookback): a lost GPU is a row with NaN metrics rather than missing.
- `families`: the `__name__` label values (index only), so absent means "not collected", not 0.
- `values:N`: the gauges in a few concurrent groups (one query runs on one core), keyed by
  family, UUID (+ `GPU_I_ID`) and pod: backfilled data has no staleness markers, so an old pod's
  series lingers for the lookback delta and the client keeps the GPU's newest pod only.
- `values:sparse`: error-counter totals only where non-zero; 0 for the other reporting GPUs.
- one `increase(...[w])` per counter family (reset-aware on the server; cold start only: warm
  cycles derive increases from the totals above, which they read anyway); error counters come
  back only where they rose (`> 0`), the rest is filled with 0 for GPUs that report.
- `xid_count` with its own sample times (the client drops counts older than the GPU's newest
  sample: dcgm-exporter drops the series when its window empties), training steps and their
  increase, `up`, the last time each exporter was up (`up_last`, cold start), the scrape interval
  (sample spacing of one GPU per node, cold start) and kube-state-metrics (two queries; the
  first also carries each node's `nvidia.com/gpu` capacity and allocatable count, `or`-ed in
  with a `resource` matcher so the other resources' series are never read: 2 series per node).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from observer.fleet.catalog import (
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
from observer.prometheus.credentials import PromAuth
from observer.snapshot.inputs import NODE_HINT_LABELS
from observer.snapshot.job_identity import DEFAULT_JOB_LABEL_KEYS
from observer.snapshot.kube_records import (
    KSM_FAMILIES,
    KSM_GPU_FAMILIES,
    KSM_GPU_RESOURCE,
    KSM_STATUS_FAMILIES,
)

TS_LABEL = "gf_ts"
"""Marks the `timestamp()` twin of a series in a query that returns both."""
DCGM_NAMES = '{__name__=~"DCGM_.+"}'
"""Series whose names the `families` request lists (index only: no samples are read)."""
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
    "exported_pod",
    "exported_namespace",
    *NODE_HINT_LABELS,
)
"""GPU identity labels (`node`/`kubernetes_node`: the exporter pod's node, where the scrape
config relabels it); `exported_*` carry the workload's pod when Prometheus scraped
dcgm-exporter without `honorLabels` (observer.prometheus.parse.workload_labels)."""
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


POD_LABEL_MODES = ("auto", "direct", "exported", "none")
"""Where the workload's pod labels are on DCGM series (`PromSettings.pod_labels`)."""
POD_LABELS_HELP = (
    "where DCGM series name the GPU's pod: auto (the default: per answer), direct "
    "(pod/namespace), exported (exported_pod/exported_namespace: scraped without honorLabels), "
    "none (no pod labels; attribute by node from Kubernetes)"
)


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
    inventory_step: float = 30.0
    """Resolution of the subquery that finds each exporter's last good scrape."""
    names_lookback: float = 300.0
    """Families count as collected when they have series in the last this-many seconds."""
    inventory_metric: str = "DCGM_FI_DEV_FB_USED"
    """The family that enumerates GPUs (default-on, reported per MIG instance too)."""
    interval_window: float = 300.0
    up_selector: str = 'up{job=~".*dcgm.*"}'
    ksm_matchers: str = ""
    """Extra matchers for kube-state-metrics series, e.g. `job="kube-state-metrics"`."""
    job_label_keys: tuple[str, ...] = DEFAULT_JOB_LABEL_KEYS
    extra_gauges: tuple[str, ...] = EXTRA_GAUGES
    concurrency: int = 8
    """Queries in flight at once (Prometheus runs each on one core; 8 measured best)."""
    compress: bool = False
    """Ask for gzip answers. Off by default: a 10k-GPU cycle is ~28 MB of JSON (~2.7 MB
    gzipped), little for an in-cluster network, while gzip was ~6 % of Prometheus' CPU in a
    profile of these cycles (0-0.9 of its ~4-5 CPU s in paired runs, within the shared
    machine's noise; docs/performance.md). Turn on across a slow or metered link."""
    range_chunk: float = 3600.0
    """Longest span of one range request; longer windows are split into chunks."""
    cluster: str = "default"
    pod_labels: str = "auto"
    """Where DCGM series name the GPU's workload: `direct` (`pod`, `namespace`: dcgm-exporter's
    own labels, honorLabels), `exported` (`exported_pod`, `exported_namespace`: Prometheus
    renamed them because the target's own `pod` label won), `none` (no pod labels: GPUs are
    attributed from Kubernetes by node), `auto` (per answer: `exported` when such labels
    appear, else `direct`). Never the exporter's own pod (the `up` series name it)."""
    headers: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    """Sent with every request, e.g. (`X-Scope-OrgID`, tenant) for Mimir or Cortex."""
    auth: PromAuth = field(default_factory=PromAuth)
    """Bearer token file, basic auth, CA bundle and client certificate
    (observer.prometheus.credentials)."""
    target_labels: tuple[str, ...] = ("job", "instance", "endpoint", "service", "prometheus")
    """Labels Prometheus adds on scrape; stripped from kube-state-metrics pod/node labels."""

    def __post_init__(self) -> None:
        if self.pod_labels not in POD_LABEL_MODES:
            raise ValueError(
                f"pod_labels: expected one of {', '.join(POD_LABEL_MODES)} "
                f"(got {self.pod_labels!r})"
            )


@dataclass(frozen=True, slots=True)
class Query:
    name: str
    promql: str
    family: str = ""
    """For per-family queries (counter increases): the catalog family."""
    essential: bool = False
    """Without this answer there is no snapshot (a Temporary/PermanentError, not degraded)."""
    kind: str = "query"
    """`query` (PromQL), or `names`: the `__name__` values of series matching `promql`."""
    cold: bool = False
    """Asked on a cold start only; later cycles answer it from memory (observer.prometheus.memory,
    and observer.prometheus.memory for the `family` queries: counter increases)."""


def _dur(seconds: float) -> str:
    return f"{round(seconds)}s"


def _names(names: Sequence[str]) -> str:
    return "|".join(names)


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


def interval_query(s: PromSettings) -> str:
    """Median sample spacing of one GPU per node: (newest - oldest sample time) / count.

    The oldest time comes from a fine subquery (it may be the sample just before the window, so
    the count is corrected by half a sample); it holds for data younger than the window too.
    """
    x = f'{s.inventory_metric}{{{LABEL_GPU}="0"}}'
    w = _dur(s.interval_window)
    return (
        f"quantile(0.5, (timestamp({x}) - min_over_time(timestamp({x})[{w}:10s])) / "
        f"(count_over_time({x}[{w}]) - 0.5))"
    )


VALUE_GROUPS = (
    ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP"),
    ("DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_USED"),
    ("DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_XID_ERRORS",
     "DCGM_FI_DEV_ROW_REMAP_FAILURE"),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
     "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),
)  # fmt: skip
"""Gauges split over a few concurrent queries: Prometheus evaluates one query on one core."""


def value_groups(s: PromSettings) -> tuple[tuple[str, ...], ...]:
    """The dense families in concurrent groups; the last one takes whatever the first miss."""
    first = {n for g in VALUE_GROUPS for n in g}
    rest = [n for n in (*gauge_families(s), *dense_counters()) if n not in first]
    return (*VALUE_GROUPS, tuple(rest))


def values_query(selector: str) -> str:
    """Latest values keyed by family, GPU and pod (the pod tells a lingering old series)."""
    return f"max by (__name__, {KEY}, {LABEL_POD}, exported_pod) ({selector})"


def plan(s: PromSettings) -> tuple[Query, ...]:
    """The cycle's queries, in a fixed order (the count never depends on the fleet)."""
    inv = s.inventory_metric
    ident = ", ".join(IDENTITY_LABELS)
    w = _dur(s.window)
    queries = [
        Query("identity", f"max by ({ident}) (timestamp({inv}))", essential=True),
        Query(
            "vanished",
            f"group by ({ident}) (last_over_time({inv}[{_dur(s.inventory_window)}])) "
            f"unless on ({KEY}) {inv}",
            cold=True,
        ),
        Query("families", DCGM_NAMES, kind="names"),
    ]
    for i, group in enumerate(value_groups(s)):
        queries.append(Query(f"values:{i}", values_query(f'{{__name__=~"{_names(group)}"}}')))
    sparse = f'{{__name__=~"{_names(SPARSE_COUNTERS)}"}} > 0'
    queries.append(Query("values:sparse", values_query(sparse)))
    for name in counter_families():
        expr = f"sum by ({KEY}) (increase({name}[{w}]))"
        if name in SPARSE_COUNTERS:
            expr += " > 0"
        queries.append(Query(f"increase:{name}", expr, family=name, cold=True))
    ksm = f",{s.ksm_matchers}" if s.ksm_matchers else ""
    up = s.up_selector
    queries += [
        Query(
            "xid_count",
            f"{XID_COUNT_METRIC} or label_replace(timestamp({XID_COUNT_METRIC}), "
            f'"{TS_LABEL}", "1", "", "")',
        ),
        Query("steps", f"max by ({LABEL_NAMESPACE}, {LABEL_POD}) ({STEPS_METRIC})"),
        Query(
            "steps_increase",
            f"sum by ({LABEL_NAMESPACE}, {LABEL_POD}) (increase({STEPS_METRIC}[{w}]))",
        ),
        Query("up", up),
        Query(
            "up_last",
            f"max_over_time((timestamp({up}) and {up} == 1)[{_dur(s.inventory_window)}:"
            f"{_dur(s.inventory_step)}])",
            cold=True,
        ),
        Query("interval", interval_query(s), cold=True),
        Query(
            "kube",
            f'{{__name__=~"{_names(KSM_FAMILIES)}"{ksm}}} or '
            f'{{__name__=~"{_names(KSM_GPU_FAMILIES)}",resource="{KSM_GPU_RESOURCE}"{ksm}}}',
        ),
        Query("kube_status", f'{{__name__=~"{_names(KSM_STATUS_FAMILIES)}"{ksm}}} == 1'),
    ]
    return tuple(queries)
