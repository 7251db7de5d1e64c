"""gpu_lost: one GPU's series stop (or XID 79) while its node's other GPUs keep reporting.

dcgm-exporter reads every GPU of a node in one pass and one scrape carries them all, so when the
node's other GPUs are fresh and one is not, the exporter could not read that GPU: it fell off
the bus, hung in the driver or was reset. Judged by the age of the GPU's newest sample (PromQL
`timestamp()`), never by presence, because Prometheus keeps answering with a stale sample for
the whole lookback window. A GPU that drops out of the snapshot entirely is remembered (by UUID,
with its node) for `forget_after_seconds`. If the whole node or fleet is silent, this detector
says nothing: that is monitoring_gap.

Severity (issue 11): a GPU silent for one scrape is at most a warning; critical needs
corroboration, i.e. XID 79, silence for `critical_intervals` while the node's other GPUs keep
reporting, or the NVIDIA device plugin withdrawing the GPU: it marks a device Unhealthy on a
critical XID (all but the application XIDs 13, 31, 43, 45, 68, 109) and the node's allocatable
`nvidia.com/gpu` drops below its capacity. Counts, not devices, are what Kubernetes shows, and
a withdrawal may be old or for another GPU of the node (an XID 48 elsewhere), so allocatable
corroborates only when the GPUs withdrawn since the silent GPU last reported cover every lost
GPU of the node plus every other GPU of the node whose XID gauge holds a critical XID.
Unknown allocatable (not collected, or the GPU never seen reporting) is no evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from detectors.base import ANY_GPU_SERIES, DetectorSpec, Needs, gpu_context
from detectors.findings import PRE_EXISTING_NOTE, Finding, FindingKind, Severity
from detectors.identity_memo import IdentityMemo, read_only
from detectors.signals import XID, telemetry_view, value
from detectors.state import KeyedArrays, align, gpu_keys, mig_sliced
from observer.fleet.model import FleetSnapshot, Node

XID_FALLEN_OFF_BUS = 79
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
"""XIDs the NVIDIA device plugin ignores (application errors): no device is withdrawn."""
ACTION = "cordon and drain the node, then reboot it (XID 79 class: RESTART_BM); RMA if it recurs"


@dataclass(frozen=True, slots=True)
class Params:
    stale_intervals: float = 1.5
    """Lost when the GPU's newest sample is older than 1.5 scrape intervals while its node is
    fresh: a healthy series is never older than one interval (plus jitter), so this fires on the
    first missed scrape, i.e. within 2 intervals of the fault."""
    node_fresh_intervals: float = 1.5
    """The node counts as reporting when its freshest GPU sample is younger than this."""
    fleet_fraction: float = 0.5
    """Same as monitoring_gap: when this share of GPU nodes is silent, judge no GPU."""
    critical_intervals: float = 3.0
    """Critical needs corroboration: the GPU silent for 3 scrape intervals while its node's other
    GPUs keep reporting (or XID 79). Before that it is a warning: one missed scrape is a late
    exporter as often as a lost GPU. Earlier when the device plugin withdrew the GPU: the node's
    allocatable `nvidia.com/gpu` fell below capacity since the GPU last reported, by at least
    the node's lost GPUs plus its other GPUs holding a critical XID (module docstring)."""
    forget_after_seconds: float = 3600.0
    """A GPU gone from the snapshot is remembered this long (then decommissioned, not lost)."""


@dataclass(frozen=True, slots=True)
class State:
    gpus: KeyedArrays
    gone: KeyedArrays
    """GPUs no longer in the snapshot: node name, last sample time, when it left."""

    def nbytes(self) -> int:
        return self.gpus.nbytes() + self.gone.nbytes()


_GPU_SPEC = {
    "node": (object, None),
    "last": (np.float64, np.nan),
    "onset": (np.float64, np.nan),
    "xid_pre": (np.float32, np.nan),  # NaN: never seen; 1: XID 79 held since first sight
    "wd_base": (np.float32, np.nan),  # node's withdrawn GPUs at this GPU's newest sample
}
_GONE_SPEC = {"node": (object, None), "last": (np.float64, np.nan), "onset": (np.float64, np.nan)}


def _node_tables(nodes: tuple[Node, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Per node position its name and its count of GPUs the device plugin withdrew (NaN:
    unknown), then None and NaN for "no node"."""
    names = np.array([n.name for n in nodes] + [None], dtype=object)
    withdrawn = np.array(
        [np.nan if n.gpus_withdrawn is None else n.gpus_withdrawn for n in nodes] + [np.nan],
        dtype=np.float64,
    )
    return read_only(names), read_only(withdrawn)


_NODE_TABLES: IdentityMemo[tuple[np.ndarray, np.ndarray]] = IdentityMemo()
"""The last nodes' tables: the same while the snapshot's nodes tuple is (frozen records)."""


_NODE_POSITIONS: IdentityMemo[dict[str, int]] = IdentityMemo()
"""The last nodes' positions by name."""

_KEYS_AS_STR: IdentityMemo[np.ndarray] = IdentityMemo()


def _as_str(keys: np.ndarray) -> np.ndarray:
    """The snapshot's GPU keys as a fixed-width string array, for `np.isin`: asked every cycle
    while a departed GPU is remembered (an hour), the same while the key array is."""
    return _KEYS_AS_STR.get((keys,), lambda: read_only(keys.astype(str)))


def _departed(
    prev: KeyedArrays | None,
    keys: np.ndarray,
    old_gone: KeyedArrays | None,
    now: float,
    forget: float,
) -> KeyedArrays:
    """Rows of `prev` whose key is not in `keys`, merged with still-remembered departed GPUs."""
    parts_k: list[np.ndarray] = []
    parts = {name: [] for name in _GONE_SPEC}  # type: dict[str, list[np.ndarray]]
    if prev is not None and len(prev):
        left = ~np.isin(prev.keys.astype(str), _as_str(keys))
        if np.any(left):
            parts_k.append(prev.keys[left])
            for name in _GONE_SPEC:
                parts[name].append(prev[name][left])
    if old_gone is not None and len(old_gone):
        keep = (now - np.fmax(old_gone["last"], old_gone["onset"]) <= forget) & ~np.isin(
            old_gone.keys.astype(str), _as_str(keys)
        )
        parts_k.append(old_gone.keys[keep])
        for name in _GONE_SPEC:
            parts[name].append(old_gone[name][keep])
    if not parts_k:
        return KeyedArrays(
            np.empty(0, dtype=object),
            MappingProxyType({n: np.empty(0, dtype=d) for n, (d, _) in _GONE_SPEC.items()}),
        )
    return KeyedArrays(
        np.concatenate(parts_k),
        MappingProxyType({n: np.concatenate(parts[n]) for n in _GONE_SPEC}),
    )


def _severity(
    silent_seconds: float, by_xid: bool, interval: float, params: Params, withdrawn: bool = False
) -> Severity:
    """Critical on XID 79, on the device plugin's withdrawal, or after `critical_intervals` of
    silence; a warning before that."""
    corroborated = silent_seconds >= params.critical_intervals * interval
    return Severity.CRITICAL if by_xid or corroborated or withdrawn else Severity.WARNING


def _corroboration(
    by_xid: bool, silent_seconds: float, severity: Severity, params: Params, interval: float,
    allocatable: str | None = None,
) -> str:  # fmt: skip
    if by_xid:
        return "xid_79"
    if severity is Severity.CRITICAL and silent_seconds >= params.critical_intervals * interval:
        return "silent_while_node_reports"
    if severity is Severity.CRITICAL and allocatable:
        return f"device plugin withdrew a GPU: allocatable {allocatable}"
    return f"none yet (silent {silent_seconds:.0f}s; one missed scrape is at most a warning)"


def _plugin_withdrew(
    snapshot: FleetSnapshot,
    lost: np.ndarray,
    wd_now: np.ndarray,
    wd_base: np.ndarray,
    xid: np.ndarray | None,
    gone: KeyedArrays | None,
) -> np.ndarray:
    """Per GPU: the device plugin withdrew enough GPUs of its node since it last reported to
    account for every lost GPU of the node and every other GPU holding a critical XID."""
    g = snapshot.gpus
    lost = np.asarray(lost, dtype=bool)  # `~fleet_gap` (a Python bool) makes it int upstream
    n_nodes = len(snapshot.nodes)
    on_node = g.node_index >= 0
    idx = np.where(on_node, g.node_index, 0)
    lost_n = np.bincount(idx[lost & on_node], minlength=n_nodes)
    if xid is not None:
        code = np.nan_to_num(xid, nan=0.0).astype(np.int64)
        critical = (code > 0) & ~np.isin(code, list(APPLICATION_XIDS)) & ~lost & on_node
        lost_n = lost_n + np.bincount(idx[critical], minlength=n_nodes)
    if gone is not None and len(gone):  # GPUs gone from the snapshot count as lost too
        pos = _NODE_POSITIONS.get(
            (snapshot.nodes,), lambda: {str(n.name): i for i, n in enumerate(snapshot.nodes)}
        )
        where = [pos[str(n)] for n in gone["node"] if str(n) in pos]
        lost_n = lost_n + np.bincount(np.asarray(where, dtype=np.int64), minlength=n_nodes)
    new = wd_now - wd_base  # NaN (no evidence) when either count is unknown
    with np.errstate(invalid="ignore"):
        out: np.ndarray = lost & on_node & (new > 0) & (new >= lost_n[idx])
    return out


def _present_finding(
    snapshot: FleetSnapshot,
    i: int,
    node: str | None,
    age: float,
    by_xid: bool,
    xid_before_start: bool,
    onset: float,
    now: float,
    interval: float,
    params: Params,
    allocatable: str | None = None,
) -> Finding:
    """Output for a GPU still in the snapshot whose samples stopped (or that raised XID 79).
    `allocatable`: "7/8" when the device plugin's withdrawal corroborates, else None."""
    g = snapshot.gpus
    # A GPU with no sample at all has been silent at least since it was first judged lost.
    silent_seconds = age if np.isfinite(age) else now - onset
    severity = _severity(silent_seconds, by_xid, interval, params, allocatable is not None)
    # XID 79 already held in the gauge at first sight, with no silence seen to corroborate it.
    silence_corroborates = silent_seconds >= params.critical_intervals * interval
    pre_existing = xid_before_start and not silence_corroborates
    if by_xid:
        what = "fell off the bus (XID 79)"
    elif np.isfinite(age):
        what = f"silent for {age:.0f}s"
    else:
        what = "gone from its exporter's page"
    return Finding(
        kind=FindingKind.GPU_LOST,
        severity=severity,
        summary=f"GPU {g.device_index[i]} on {node} {what} while the node's other GPUs report"
        + (f" ({PRE_EXISTING_NOTE})" if pre_existing else ""),
        first_seen=onset,
        last_seen=now,
        node=node,
        gpu_uuid=str(g.uuid[i]),
        evidence={
            **gpu_context(snapshot, i),
            "last_sample_age_s": round(age, 1) if np.isfinite(age) else None,
            "threshold_s": params.stale_intervals * interval,
            "critical_after_s": params.critical_intervals * interval,
            "corroboration": _corroboration(
                by_xid, silent_seconds, severity, params, interval, allocatable
            ),
            "xid": XID_FALLEN_OFF_BUS if by_xid else None,
            "node_gpus_allocatable": _allocatable(snapshot, i),
            "scrape_interval": interval,
            "pre_existing": PRE_EXISTING_NOTE if pre_existing else None,
        },
        recommended_action=ACTION,
        pre_existing=pre_existing,
    )


def _allocatable(snapshot: FleetSnapshot, i: int) -> str | None:
    """The GPU's node's `allocatable/capacity` nvidia.com/gpu ("7/8"), None when unknown."""
    node_index = int(snapshot.gpus.node_index[i])
    if node_index < 0:
        return None
    node = snapshot.nodes[node_index]
    if node.gpu_capacity is None or node.gpu_allocatable is None:
        return None
    return f"{node.gpu_allocatable}/{node.gpu_capacity}"


def _sibling_reports(uuid: np.ndarray, mig: np.ndarray, fresh: np.ndarray) -> np.ndarray:
    """Per row: a MIG instance whose physical GPU (same UUID) still reports on another row.
    Re-partitioning a GPU replaces its instances; the GPU is not lost while any instance of it
    reports (dcgm-exporter's flex mode writes only per-instance series for a MIG GPU)."""
    sliced = mig_sliced(mig)
    if not bool(sliced.any()):
        return np.zeros(uuid.shape[0], dtype=bool)
    out: np.ndarray = sliced & np.isin(uuid, uuid[fresh & sliced])
    return out


def _departed_findings(
    snapshot: FleetSnapshot,
    gone: KeyedArrays,
    node_up: np.ndarray,
    fleet_gap: bool,
    now: float,
    interval: float,
    params: Params,
) -> tuple[list[Finding], KeyedArrays]:
    """Decision and output for GPUs gone from the snapshot while their node still reports."""
    up_nodes = {str(snapshot.nodes[i].name) for i in np.flatnonzero(node_up)}
    on_up_node = np.array([n in up_nodes for n in gone["node"]], dtype=bool)
    if fleet_gap:  # blind: keep what we knew, judge nothing new
        on_up_node = ~np.isnan(gone["onset"])
    onset = np.where(on_up_node, np.fmin(gone["onset"], now), np.nan)
    gone = gone.replace(onset=onset)
    findings: list[Finding] = []
    for row in np.flatnonzero(on_up_node):
        i = int(row)
        last = float(gone["last"][i])
        silent_seconds = now - last if np.isfinite(last) else now - float(onset[i])
        severity = _severity(silent_seconds, False, interval, params)
        findings.append(
            Finding(
                kind=FindingKind.GPU_LOST,
                severity=severity,
                summary=f"GPU {gone.keys[i]} on {gone['node'][i]} vanished from telemetry "
                "while the node's other GPUs report",
                first_seen=float(onset[i]),
                last_seen=now,
                node=str(gone["node"][i]),
                gpu_uuid=str(gone.keys[i]).split("/", 1)[0],
                evidence={
                    "last_sample_age_s": round(now - last, 1) if np.isfinite(last) else None,
                    "absent_from_snapshot": True,
                    "critical_after_s": params.critical_intervals * interval,
                    "corroboration": _corroboration(
                        False, silent_seconds, severity, params, interval
                    ),
                    "scrape_interval": interval,
                },
                recommended_action=ACTION,
            )
        )
    return findings, gone


def _gone_since(
    state: State | None, keys: np.ndarray, now: float, params: Params
) -> KeyedArrays | None:
    """GPUs gone from the snapshot (kept until forgotten), updated only when the fleet's
    membership changed or some are still remembered."""
    prev_gpus = state.gpus if state else None
    membership_changed = prev_gpus is not None and not (
        prev_gpus.keys is keys
        or (prev_gpus.keys.shape == keys.shape and bool(np.array_equal(prev_gpus.keys, keys)))
    )
    gone = state.gone if state else None
    if membership_changed or (gone is not None and len(gone)):
        gone = _departed(
            prev_gpus if membership_changed else None, keys, gone, now, params.forget_after_seconds
        )
    return gone


def _withdrawn(
    snapshot: FleetSnapshot, cur: KeyedArrays, last: np.ndarray, lost: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per GPU its node's count of GPUs the device plugin withdrew, now and as of the GPU's
    newest sample: the plugin reacts to the XID at once, a scrape or two before the GPU counts
    as silent, so only a new sample moves the base."""
    g = snapshot.gpus
    has_node = g.node_index >= 0
    wd_node = _NODE_TABLES.get((snapshot.nodes,), lambda: _node_tables(snapshot.nodes))[1]
    wd_now = wd_node[np.where(has_node, g.node_index, len(snapshot.nodes))]
    with np.errstate(invalid="ignore"):
        new_sample = (last > cur["last"]) | (np.isnan(cur["last"]) & np.isfinite(last))
    wd_base = np.where(~lost.astype(bool) & new_sample, wd_now, cur["wd_base"])
    return wd_now, wd_base


def _without_repartitioned(gone: KeyedArrays, uuid: np.ndarray, silent: np.ndarray) -> KeyedArrays:
    """Drop MIG instances a re-partition removed: their GPU still reports, nothing was lost."""
    mig_gone = np.array(["/" in str(k) for k in gone.keys], dtype=bool)
    if not mig_gone.any():
        return gone
    reporting = set(uuid[~silent].tolist())
    keep = ~(mig_gone & np.array([str(k).split("/")[0] in reporting for k in gone.keys]))
    return KeyedArrays(gone.keys[keep], MappingProxyType({c: gone[c][keep] for c in gone.cols}))


def detect(
    snapshot: FleetSnapshot, state: State | None, now: float, params: Params
) -> tuple[list[Finding], State]:
    g = snapshot.gpus
    keys = gpu_keys(snapshot)
    view = telemetry_view(snapshot, now, params.node_fresh_intervals, params.fleet_fraction)
    interval = view.interval
    prev_gpus = state.gpus if state else None
    gone = _gone_since(state, keys, now, params)
    cur = align(prev_gpus, keys, _GPU_SPEC)

    # Evidence: each GPU's node, sample age, XID 79, and whether its node reports.
    node_names = _NODE_TABLES.get((snapshot.nodes,), lambda: _node_tables(snapshot.nodes))[0]
    node_of = node_names[np.where(g.node_index >= 0, g.node_index, len(snapshot.nodes))]
    last = np.where(np.isfinite(view.gpu_age), now - view.gpu_age, np.nan)
    xid = value(snapshot, XID, now, params.stale_intervals * interval * 4)
    xid79 = (xid == XID_FALLEN_OFF_BUS) if xid is not None else np.zeros(len(g), dtype=bool)
    node_reports = np.zeros(len(g), dtype=bool)
    has_node = g.node_index >= 0
    node_reports[has_node] = view.node_up[g.node_index[has_node]]
    silent = view.gpu_age > params.stale_intervals * interval
    first_sight = np.isnan(cur["xid_pre"])
    xid_pre = np.where(first_sight, xid79, (cur["xid_pre"] > 0) & xid79)

    # Decision. Blind (fleet gap, node exporter down): keep what we knew, judge nothing new.
    was_lost = ~np.isnan(cur["onset"])
    repartitioned = silent & _sibling_reports(g.uuid, g.mig_instance, ~silent)
    judged_lost = ~view.fleet_gap & ((silent & node_reports & ~repartitioned) | xid79)
    lost = judged_lost | (was_lost & (view.fleet_gap | ~node_reports) & ~repartitioned)
    onset = np.where(lost, np.fmin(cur["onset"], now), np.nan)
    wd_now, wd_base = _withdrawn(snapshot, cur, last, lost)
    withdrew = _plugin_withdrew(snapshot, lost, wd_now, wd_base, xid, gone)

    findings = [
        _present_finding(
            snapshot, int(i), node_of[i], float(view.gpu_age[i]), bool(xid79[i]),
            bool(xid_pre[i]), float(onset[i]), now, interval, params,
            _allocatable(snapshot, int(i)) if withdrew[i] else None,
        )
        for i in np.flatnonzero(lost)
    ]  # fmt: skip
    if gone is not None and len(gone):
        gone = _without_repartitioned(gone, g.uuid, silent)
        departed, gone = _departed_findings(
            snapshot, gone, view.node_up, view.fleet_gap, now, interval, params
        )
        findings.extend(departed)
    new = cur.replace(
        node=node_of,
        last=np.fmax(cur["last"], last),
        onset=onset,
        xid_pre=xid_pre.astype(np.float32),
        wd_base=wd_base.astype(np.float32),
    )
    if gone is None:
        gone = _departed(None, keys, None, now, params.forget_after_seconds)
    return findings, State(new, gone)


NEEDS = Needs(
    ((ANY_GPU_SERIES,),),
    (XID,),
    {
        XID: "no XID 79 corroboration: critical only after 3 silent scrape intervals (or on "
        "the device plugin's withdrawal, where node allocatable GPUs are collected)"
    },
    {XID: ()},
)
"""The fields this detector reads, for detectors.coverage: what it needs to run at all,
what full evidence is, and what it infers from when a field is missing. Node allocatable GPUs
are not listed: coverage is about dcgm-exporter fields (its remedy is a counters-CSV line), and
the count comes from Kubernetes; without it only the earlier critical is lost."""


SPEC = DetectorSpec(
    needs=NEEDS,
    name="gpu_lost",
    params_type=Params,
    detect=detect,
    kinds=(FindingKind.GPU_LOST,),
    severities=(Severity.CRITICAL, Severity.WARNING),
    doc="A GPU's series go stale (or XID 79) while its node's other GPUs keep reporting; "
    "critical on XID 79, on the device plugin's withdrawal (node allocatable GPUs) or after "
    "3 silent intervals, a warning before that.",
)
