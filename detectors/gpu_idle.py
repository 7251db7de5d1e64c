"""gpu_idle: a GPU allocated to a pod that does nothing with it, for long enough to be waste.

Allocated-but-idle GPUs (a forgotten notebook, a stuck data loader, a job waiting on a
dependency) are the most common waste in a GPU fleet and invisible to health checks. The clock
is per (GPU, pod): a new pod on the GPU starts it over, any real activity resets it, stale data
holds it. Checkpoints (minutes) and start-up stay far below `idle_seconds`. Info, warning after
`warn_after_seconds`; never remediated by default (a person decides whether to reclaim it).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from detectors.base import DetectorSpec, Needs, gpu_context, node_name
from detectors.findings import Finding, FindingKind, Severity
from detectors.identity_memo import IdentityMemo, read_only
from detectors.signals import GR_ACTIVE, UTIL, dt_since, scrape_interval, value
from detectors.state import GpuCycleState, align, gpu_keys
from observer.fleet.model import FleetSnapshot


@dataclass(frozen=True, slots=True)
class Params:
    idle_util: float = 2.0
    """Utilisation <= 2 %: no kernel ran in practice (monitoring probes and a CUDA context
    alone read 0-1 %)."""
    idle_activity: float = 0.02
    """Graphics-engine activity <= 2 % where profiling metrics are collected."""
    idle_seconds: float = 1800.0
    """Idle for 30 min: longer than any checkpoint, evaluation or start-up pause."""
    warn_after_seconds: float = 14400.0
    """Idle for 4 h (half a working day): warning."""
    max_age_intervals: float = 2.5


State = GpuCycleState


_SPEC = {"idle": (np.float32, 0.0), "pod": (np.uint32, 0)}


def _pod_hashes(snapshot: FleetSnapshot) -> np.ndarray:
    """Per pod position a hash of its key (odd), then 0 for "no pod": a new pod on a GPU
    restarts its clock."""
    # The pod's key (`Pod.key`) spelled out: the property and its NewType cost 3x the hash.
    return read_only(
        np.array(
            [zlib.crc32(f"{p.namespace}/{p.name}".encode()) | 1 for p in snapshot.pods] + [0],
            dtype=np.uint32,
        )
    )


_POD_HASHES: IdentityMemo[np.ndarray] = IdentityMemo()
"""The last pods' hashes: the same while the snapshot's pods tuple is."""


def detect(
    snapshot: FleetSnapshot, state: State | None, now: float, params: Params
) -> tuple[list[Finding], State]:
    g = snapshot.gpus
    interval = scrape_interval(snapshot)
    age = params.max_age_intervals * interval
    cur = align(state.gpus if state else None, gpu_keys(snapshot), _SPEC)
    dt = dt_since(state.last_now if state else np.nan, now, interval)
    util = value(snapshot, UTIL, now, age)
    if util is None:
        return [], State(cur, now)
    pod_hash = _POD_HASHES.get((snapshot.pods,), lambda: _pod_hashes(snapshot))
    pod = pod_hash[np.where(g.pod_index >= 0, g.pod_index, len(snapshot.pods))]
    allocated = pod != 0
    idle = allocated & (util <= params.idle_util)
    act = value(snapshot, GR_ACTIVE, now, age)
    if act is not None:
        idle &= ~(act > params.idle_activity)  # NaN (not collected) passes
    known = ~np.isnan(util)
    same_pod = cur["pod"] == pod
    base = np.where(same_pod, cur["idle"], 0.0)
    acc = np.where(known, np.where(idle, base + dt, 0.0), base).astype(np.float32)
    acc = np.where(allocated, acc, 0.0).astype(np.float32)
    active = acc >= params.idle_seconds
    findings: list[Finding] = []
    for i in np.flatnonzero(active):
        ctx = gpu_context(snapshot, int(i))
        node = node_name(snapshot, int(g.node_index[i]))
        secs = float(acc[i])
        sev = Severity.WARNING if secs >= params.warn_after_seconds else Severity.INFO
        findings.append(
            Finding(
                kind=FindingKind.GPU_IDLE,
                severity=sev,
                summary=f"GPU {g.device_index[i]} on {node} allocated to {ctx['pod']} "
                f"but idle for {secs / 60:.0f} min",
                first_seen=now - secs,
                last_seen=now,
                node=node,
                gpu_uuid=str(g.uuid[i]),
                evidence={
                    **ctx,
                    "util": float(util[i]),
                    "idle_s": round(secs, 1),
                    "threshold_s": params.idle_seconds,
                },
                recommended_action="ask the owner to release the GPU (scale the pod down); "
                "not remediated automatically",
            )
        )
    return findings, State(cur.replace(idle=acc, pod=pod), now)


NEEDS = Needs(
    ((UTIL,),),
    (UTIL, GR_ACTIVE),
    {GR_ACTIVE: "utilisation only (a kernel resident but doing little reads as busy)"},
    {GR_ACTIVE: (UTIL,)},
)
"""The fields this detector reads, for detectors.coverage: what it needs to run at all,
what full evidence is, and what it infers from when a field is missing."""


SPEC = DetectorSpec(
    needs=NEEDS,
    name="gpu_idle",
    params_type=Params,
    detect=detect,
    kinds=(FindingKind.GPU_IDLE,),
    severities=(Severity.WARNING, Severity.INFO),
    doc="GPU allocated to a pod but idle for a configurable time (waste).",
)
