"""monitoring_gap: a node's exporter (or the whole source) is silent, so its GPUs cannot be judged.

Silence is not failure. When every GPU of a node stops reporting at once, the common cause is the
exporter (restart, OOM, scrape failure), not eight GPUs dying together; when most of the fleet
goes quiet, it is Prometheus or the network. Saying so — and only so — is what keeps an exporter
outage from becoming a wall of gpu_lost pages. Info: it is a statement about the monitoring, not
about the GPUs (Prometheus' own `up == 0` alerting pages for the exporter); set
`warn_after_seconds` to escalate gaps that outlast any restart to a warning.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from detectors.base import ANY_GPU_SERIES, DetectorSpec, Needs
from detectors.findings import Finding, FindingKind, Severity
from detectors.identity_memo import IdentityMemo, read_only
from detectors.signals import TelemetryView, telemetry_view
from detectors.state import KeyedArrays, align
from observer.fleet.model import FleetSnapshot, Node


@dataclass(frozen=True, slots=True)
class Params:
    stale_intervals: float = 2.5
    """A node is silent after 2.5 scrape intervals without a sample: two missed scrapes (one
    missed scrape is routine jitter or a slow exporter and is not worth a finding)."""
    fleet_fraction: float = 0.5
    """At least this share of GPU nodes silent is a source-side gap (Prometheus, network), reported
    once for the fleet instead of per node: half the fleet failing at once is not the nodes."""
    warn_after_seconds: float = 0.0
    """Escalate a gap to warning after this long (0: never). 1800 (30 min, longer than any
    exporter restart or rollout) suits teams without alerting on the exporters themselves."""


@dataclass(frozen=True, slots=True)
class State:
    nodes: KeyedArrays
    fleet_onset: float = float("nan")

    def nbytes(self) -> int:
        return self.nodes.nbytes()


_SPEC = {
    "onset": (np.float64, np.nan),
    "watched": (np.bool_, False),
    "last": (np.float64, np.nan),
}


def _node_keys(nodes: tuple[Node, ...]) -> np.ndarray:
    """The nodes' names, the state's keys."""
    return read_only(np.array([n.name for n in nodes], dtype=object))


_NODE_KEYS: IdentityMemo[np.ndarray] = IdentityMemo()
"""The last nodes' keys: the same array while the snapshot's nodes tuple is, so the state's
re-alignment finds the very same keys (state.align's fast path)."""


def _severity(lasted: float, params: Params) -> Severity:
    if params.warn_after_seconds > 0 and lasted >= params.warn_after_seconds:
        return Severity.WARNING
    return Severity.INFO


def detect(
    snapshot: FleetSnapshot, state: State | None, now: float, params: Params
) -> tuple[list[Finding], State]:
    view = telemetry_view(snapshot, now, params.stale_intervals, params.fleet_fraction)
    keys = _NODE_KEYS.get((snapshot.nodes,), lambda: _node_keys(snapshot.nodes))
    prev = align(state.nodes if state else None, keys, _SPEC)
    # A node is watched once it has had GPUs; after Prometheus' lookback its vanished series
    # leave the snapshot, but a silent exporter stays a gap (CPU nodes are never watched).
    watched = view.node_has_gpus | prev["watched"]
    silent = watched & ~view.node_up
    seen = np.where(np.isfinite(view.node_age), now - view.node_age, np.nan)
    last = np.fmax(prev["last"], seen)
    onset = np.where(silent, np.fmin(prev["onset"], now), np.nan)
    findings: list[Finding] = []
    fleet_onset = float("nan")
    if view.fleet_gap:
        prev_fleet = state.fleet_onset if state else float("nan")
        fleet_onset = now if np.isnan(prev_fleet) else prev_fleet
        findings.append(_fleet_finding(snapshot, view, int(silent.sum()), fleet_onset, now, params))
    else:
        for i in np.flatnonzero(silent):
            findings.append(_node_finding(snapshot, view, int(i), last, onset, now, params))
    return findings, State(prev.replace(onset=onset, watched=watched, last=last), fleet_onset)


def _fleet_finding(
    snapshot: FleetSnapshot,
    view: TelemetryView,
    silent_nodes: int,
    fleet_onset: float,
    now: float,
    params: Params,
) -> Finding:
    """One finding for a fleet-wide gap (its reason from the source): GPU findings pause."""
    reason = (
        snapshot.telemetry.degraded_reason
        if snapshot.telemetry and snapshot.telemetry.degraded_reason
        else "source unavailable"
        if snapshot.telemetry and not snapshot.telemetry.source_ok
        else "most GPU nodes silent"
    )
    return Finding(
        kind=FindingKind.MONITORING_GAP,
        severity=_severity(now - fleet_onset, params),
        summary=(
            f"telemetry gap across the fleet ({reason}): "
            f"{view.fleet_silent_fraction:.0%} of GPU nodes silent; GPU findings paused"
        ),
        first_seen=fleet_onset,
        last_seen=now,
        evidence={
            "silent_fraction": round(view.fleet_silent_fraction, 3),
            "silent_nodes": silent_nodes,
            "scrape_interval": view.interval,
            "reason": reason,
        },
        recommended_action="check Prometheus and the scrape targets; no GPU action",
    )


def _node_finding(
    snapshot: FleetSnapshot,
    view: TelemetryView,
    i: int,
    last: np.ndarray,
    onset: np.ndarray,
    now: float,
    params: Params,
) -> Finding:
    """Node `i`'s exporter is silent: its GPUs' health is unknown, not bad."""
    age = now - float(last[i])
    since = float(onset[i])
    sev = _severity(now - since, params)
    never = not np.isfinite(age)
    return Finding(
        kind=FindingKind.MONITORING_GAP,
        severity=sev,
        summary=(
            f"node {snapshot.nodes[i].name}: GPU exporter "
            + ("has never reported" if never else f"silent for {age:.0f}s")
        ),
        first_seen=since,
        last_seen=now,
        node=str(snapshot.nodes[i].name),
        evidence={
            "last_sample_age_s": None if never else round(age, 1),
            "threshold_s": params.stale_intervals * view.interval,
            "scrape_interval": view.interval,
        },
        recommended_action=(
            "check the dcgm-exporter pod and its scrape target on this node; "
            "GPU health on it is unknown, not bad"
        ),
    )


NEEDS = Needs(((ANY_GPU_SERIES,),), (), {}, {})

"""The fields this detector reads, for detectors.coverage: what it needs to run at all,
what full evidence is, and what it infers from when a field is missing."""


SPEC = DetectorSpec(
    needs=NEEDS,
    name="monitoring_gap",
    params_type=Params,
    detect=detect,
    kinds=(FindingKind.MONITORING_GAP,),
    severities=(Severity.WARNING, Severity.INFO),
    doc="Node exporter or the whole source silent (never read as a lost GPU).",
)
