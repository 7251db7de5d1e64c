"""gpu_lost: one GPU's series stop (or XID 79) while its node's other GPUs keep reporting.

dcgm-exporter reads every GPU of a node in one pass and one scrape carries them all, so when the
node's other GPUs are fresh and one is not, the exporter could not read that GPU: it fell off
the bus, hung in the driver or was reset. Judged by the age of the GPU's newest sample (PromQL
`timestamp()`), never by presence, because Prometheus keeps answering with a stale sample for
the whole lookback window. A GPU that drops out of the snapshot entirely is remembered (by UUID,
with its node) for `forget_after_seconds`. If the whole node or fleet is silent, this detector
says nothing: that is monitoring_gap.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from detectors.base import DetectorSpec, gpu_context
from detectors.findings import Finding, FindingKind, Severity
from detectors.signals import XID, telemetry_view, value
from detectors.state import KeyedArrays, align, gpu_keys
from observer.fleet.model import FleetSnapshot

XID_FALLEN_OFF_BUS = 79
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
    forget_after_seconds: float = 3600.0
    """A GPU gone from the snapshot is remembered this long (then decommissioned, not lost)."""


@dataclass(frozen=True, slots=True)
class State:
    gpus: KeyedArrays
    gone: KeyedArrays
    """GPUs no longer in the snapshot: node name, last sample time, when it left."""

    def nbytes(self) -> int:
        return self.gpus.nbytes() + self.gone.nbytes()


_GPU_SPEC = {"node": (object, None), "last": (np.float64, np.nan), "onset": (np.float64, np.nan)}
_GONE_SPEC = {"node": (object, None), "last": (np.float64, np.nan), "onset": (np.float64, np.nan)}


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
        left = ~np.isin(prev.keys.astype(str), keys.astype(str))
        if np.any(left):
            parts_k.append(prev.keys[left])
            for name in _GONE_SPEC:
                parts[name].append(prev[name][left])
    if old_gone is not None and len(old_gone):
        keep = (now - np.fmax(old_gone["last"], old_gone["onset"]) <= forget) & ~np.isin(
            old_gone.keys.astype(str), keys.astype(str)
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


def detect(
    snapshot: FleetSnapshot, state: State | None, now: float, params: Params
) -> tuple[list[Finding], State]:
    g = snapshot.gpus
    keys = gpu_keys(snapshot)
    view = telemetry_view(snapshot, now, params.node_fresh_intervals, params.fleet_fraction)
    interval = view.interval
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
    cur = align(prev_gpus, keys, _GPU_SPEC)
    node_names = np.array([n.name for n in snapshot.nodes] + [None], dtype=object)
    node_of = node_names[np.where(g.node_index >= 0, g.node_index, len(snapshot.nodes))]
    last = np.where(np.isfinite(view.gpu_age), now - view.gpu_age, np.nan)

    xid = value(snapshot, XID, now, params.stale_intervals * interval * 4)
    xid79 = (xid == XID_FALLEN_OFF_BUS) if xid is not None else np.zeros(len(g), dtype=bool)
    node_ok = np.zeros(len(g), dtype=bool)
    has_node = g.node_index >= 0
    node_ok[has_node] = view.node_up[g.node_index[has_node]]
    silent = view.gpu_age > params.stale_intervals * interval
    # Blind (fleet gap, node exporter down): keep what we knew, judge nothing new.
    was_lost = ~np.isnan(cur["onset"])
    lost = (~view.fleet_gap & ((silent & node_ok) | xid79)) | (
        was_lost & (view.fleet_gap | ~node_ok)
    )
    onset = np.where(lost, np.fmin(cur["onset"], now), np.nan)

    findings: list[Finding] = []
    for i in np.flatnonzero(lost):
        age = float(view.gpu_age[i])
        by_xid = bool(xid79[i])
        findings.append(
            Finding(
                kind=FindingKind.GPU_LOST,
                severity=Severity.CRITICAL,
                summary=(
                    f"GPU {g.device_index[i]} on {node_of[i]} "
                    + (
                        "fell off the bus (XID 79)"
                        if by_xid
                        else f"silent for {age:.0f}s"
                        if np.isfinite(age)
                        else "gone from its exporter's page"
                    )
                    + " while the node's other GPUs report"
                ),
                first_seen=float(onset[i]),
                last_seen=now,
                node=node_of[i],
                gpu_uuid=str(g.uuid[i]),
                evidence={
                    **gpu_context(snapshot, int(i)),
                    "last_sample_age_s": round(age, 1) if np.isfinite(age) else None,
                    "threshold_s": params.stale_intervals * interval,
                    "xid": XID_FALLEN_OFF_BUS if by_xid else None,
                    "scrape_interval": interval,
                },
                recommended_action=ACTION,
            )
        )
    if gone is not None and len(gone):
        up_nodes = {str(snapshot.nodes[i].name) for i in np.flatnonzero(view.node_up)}
        gone_on = np.array([n in up_nodes for n in gone["node"]], dtype=bool)
        if view.fleet_gap:
            gone_on = ~np.isnan(gone["onset"])
        g_onset = np.where(gone_on, np.fmin(gone["onset"], now), np.nan)
        gone = gone.replace(onset=g_onset)
        for i in np.flatnonzero(gone_on):
            findings.append(
                Finding(
                    kind=FindingKind.GPU_LOST,
                    severity=Severity.CRITICAL,
                    summary=f"GPU {gone.keys[i]} on {gone['node'][i]} vanished from telemetry "
                    "while the node's other GPUs report",
                    first_seen=float(g_onset[i]),
                    last_seen=now,
                    node=str(gone["node"][i]),
                    gpu_uuid=str(gone.keys[i]).split("/", 1)[0],
                    evidence={
                        "last_sample_age_s": round(now - float(gone["last"][i]), 1)
                        if np.isfinite(gone["last"][i])
                        else None,
                        "absent_from_snapshot": True,
                        "scrape_interval": interval,
                    },
                    recommended_action=ACTION,
                )
            )
    new = cur.replace(node=node_of, last=np.fmax(cur["last"], last), onset=onset)
    if gone is None:
        gone = _departed(None, keys, None, now, params.forget_after_seconds)
    return findings, State(new, gone)


SPEC = DetectorSpec(
    name="gpu_lost",
    params_type=Params,
    detect=detect,
    kinds=(FindingKind.GPU_LOST,),
    doc="A GPU's series go stale (or XID 79) while its node's other GPUs keep reporting.",
)
