"""straggler: within a job, one GPU persistently slower than its peers (the others wait for it).

In synchronous training every rank meets every other at each collective, so a slow GPU sets the
pace: it stays busy while its peers finish early and wait in NCCL. Waiting ranks spin inside
NCCL kernels, which keeps their utilisation (and graphics-engine activity) up, but their tensor
pipe idles; so per scrape the straggler reads as tensor activity (graphics engine for jobs that
do not use tensor cores) well above the job's median, relative to it, while the job is in its
main compute phase — or as an SM clock well below the job's (a clock-limited GPU). Two
look-alikes must stay quiet:
- imbalance that rotates among ranks (sequence-length variance): each rank is the busiest only
  now and then, so the leaky persistence counter never fills;
- a whole parallel group uniformly busier (a heavier pipeline stage on one node): each GPU is
  compared with its node-mates in the job too, and only a GPU that stands out from them is a bad
  GPU; a group that stands out is reported once, as job-level info (entity job + node).
Rows whose data is stale, and jobs that are not computing (checkpoint, hang), hold their counters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from detectors.base import DetectorSpec, gpu_context, node_name, register
from detectors.findings import Finding, FindingKind, Severity
from detectors.signals import (
    GR_ACTIVE,
    POWER,
    SM_CLOCK,
    TENSOR_ACTIVE,
    UTIL,
    dt_since,
    group_median,
    hysteresis,
    persist,
    scrape_interval,
    value,
)
from detectors.state import GpuCycleState, align, gpu_keys
from observer.model import NO_INDEX, FleetSnapshot, IntArray

ACTION = (
    "run DCGM diag (level 2) on the GPU at the next checkpoint; if it fails or the straggler "
    "persists, cordon the node and restart the job without it"
)


@dataclass(frozen=True, slots=True)
class Params:
    min_gap: float = 0.07
    """Relative activity gap to the job's median (and to its node-mates) that marks the pacing
    rank. A rank s slower makes its peers wait s/(1+s) of each step, so their activity drops by
    that share: 25 % slower gives a gap of 0.25, 10 % slower 0.10; 0.07 puts the detection
    limit near 8 % slower. Healthy ranks of one job agree within a few percent per scrape, and
    smoothing plus persistence absorb the rest."""
    tensor_floor: float = 0.05
    """Use the tensor pipe as the job's signal when its median is at least 5 % (the job uses
    tensor cores); else the graphics engine."""
    busy_util: float = 50.0
    """The straggler is busy: utilisation >= 50 %."""
    job_active: float = 0.1
    """Judge a job only while it computes (median signal >= 0.1): not during checkpoints,
    hangs or start-up, where ranks legitimately differ."""
    main_phase: float = 0.85
    """...and only in its main compute phase: the job's busiest GPU at >= 85 % of the job's own
    recent peak. Evaluation and other lighter phases lower every rank; a straggler lowers only
    its peers (they wait) and stays at the peak itself. Counters hold through lighter phases."""
    peak_decay: float = 0.995
    """Per-cycle decay of that remembered peak (half-life ~70 cycles, ~35 min at 30 s)."""
    clock_drop: float = 0.1
    """SM clock 10 % below the job's busy median also marks a GPU (same work, fewer cycles)."""
    min_job_gpus: int = 4
    """Peer comparison needs at least 4 fresh GPUs in the job."""
    min_group_gpus: int = 3
    """With >= 3 of the job's GPUs on a node, a GPU must also stand out from its node-mates."""
    max_outliers: int = 1
    """Where node-mates cannot be compared, at most this many elevated GPUs per job (more is a
    group, i.e. stage imbalance)."""
    smooth_seconds: float = 60.0
    """Time constant of the gap smoothing: two 30 s scrapes. Halves per-scrape noise while a
    real gap (steady for minutes) passes through within a minute or two."""
    min_seconds: float = 180.0
    """Persistence: 3 minutes of flagged scrapes (6 at 30 s), within the 5-minute target and far
    longer than any rotation of per-step imbalance."""
    max_age_intervals: float = 2.5


State = GpuCycleState


_SPEC = {
    "acc": (np.float32, 0.0),
    "onset": (np.float64, np.nan),
    "gacc": (np.float32, 0.0),
    "gonset": (np.float64, np.nan),
    "peak": (np.float32, np.nan),
    "gap_job": (np.float32, np.nan),
    "gap_grp": (np.float32, np.nan),
}


def _group_ids(job: IntArray, node: IntArray, valid: np.ndarray) -> tuple[IntArray, int]:
    combo = job.astype(np.int64) * (int(node.max(initial=0)) + 1) + node.astype(np.int64)
    combo = np.where(valid, combo, -1)
    uniq, inv = np.unique(combo, return_inverse=True)
    offset = 1 if uniq.shape[0] and uniq[0] == -1 else 0
    gid = (inv.astype(np.int32) - offset).astype(np.int32)
    return np.where(valid, gid, NO_INDEX).astype(np.int32), int(uniq.shape[0] - offset)


def _compute_signal(
    snapshot: FleetSnapshot,
    now: float,
    age: float,
    util: np.ndarray | None,
    jsafe: IntArray,
    n_jobs: int,
    params: Params,
) -> tuple[np.ndarray | None, list[str]]:
    """Per GPU, the job's "doing math" signal: the tensor pipe where the job uses it, else the
    graphics engine, else utilisation. Waiting ranks spin in NCCL kernels, which keeps
    utilisation and graphics activity up but not the tensor pipe."""
    tensor = value(snapshot, TENSOR_ACTIVE, now, age)
    gr = value(snapshot, GR_ACTIVE, now, age)
    fallback = gr if gr is not None and not np.all(np.isnan(gr)) else None
    if fallback is None and util is not None:
        fallback = util / 100.0
    if tensor is None or np.all(np.isnan(tensor)) or n_jobs == 0:
        return fallback, [("graphics" if fallback is gr else "util")] * n_jobs
    in_job = snapshot.gpus.job_index >= 0
    tmed = group_median(tensor, np.where(in_job, snapshot.gpus.job_index, NO_INDEX), n_jobs)
    uses = np.nan_to_num(tmed, nan=0.0) >= params.tensor_floor
    signal = ["tensor" if u else ("graphics" if fallback is gr else "util") for u in uses]
    if fallback is None:
        return np.where(uses[jsafe], tensor, np.nan), signal
    return np.where(in_job & uses[jsafe], tensor, fallback), signal


def detect(
    snapshot: FleetSnapshot, state: State | None, now: float, params: Params
) -> tuple[list[Finding], State]:
    g = snapshot.gpus
    n = len(g)
    n_jobs = len(snapshot.jobs)
    interval = scrape_interval(snapshot)
    age = params.max_age_intervals * interval
    cur = align(state.gpus if state else None, gpu_keys(snapshot), _SPEC)
    dt = dt_since(state.last_now if state else np.nan, now, interval)
    util = value(snapshot, UTIL, now, age)
    jsafe = np.clip(g.job_index, 0, max(n_jobs - 1, 0))
    act, signal = _compute_signal(snapshot, now, age, util, jsafe, n_jobs, params)
    if act is None or n_jobs == 0 or n == 0:
        return [], State(cur, now)
    clock = value(snapshot, SM_CLOCK, now, age)
    valid = (g.job_index >= 0) & ~np.isnan(act)
    jid = np.where(valid, g.job_index, NO_INDEX).astype(np.int32)
    job_n = np.bincount(jid[valid], minlength=n_jobs)
    job_med = group_median(act, jid, n_jobs)
    med = np.where(valid, job_med[jsafe], np.nan)
    job_max = np.full(n_jobs, np.nan)
    np.fmax.at(job_max, jid[valid], act[valid])
    top = np.where(valid, job_max[jsafe], np.nan)
    peak = np.where(valid, np.fmax(top, cur["peak"] * params.peak_decay), cur["peak"]).astype(
        np.float32
    )
    with np.errstate(invalid="ignore"):
        main = top >= params.main_phase * peak
    judged = valid & (job_n[jsafe] >= params.min_job_gpus) & (med >= params.job_active) & main

    gid, n_groups = _group_ids(g.job_index, g.node_index, valid)
    grp_n = np.bincount(gid[gid >= 0], minlength=n_groups)
    grp_med = group_median(act, gid, n_groups)
    gsafe = np.clip(gid, 0, max(n_groups - 1, 0))
    gmed = np.where(gid >= 0, grp_med[gsafe] if n_groups else np.nan, np.nan)
    gsize = np.where(gid >= 0, grp_n[gsafe] if n_groups else 0, 0)

    with np.errstate(invalid="ignore", divide="ignore"):
        raw_job = (act - med) / med
        raw_grp = (act - gmed) / gmed
    # Smooth the gaps (EWMA, time constant `smooth_seconds`) so that scrape noise around the
    # threshold does not drain the persistence counter; held while the job is not judged.
    alpha = float(1.0 - np.exp(-dt / params.smooth_seconds))
    ej, eg = cur["gap_job"], cur["gap_grp"]
    gap_job = np.where(
        judged, np.where(np.isnan(ej), raw_job, ej + alpha * (raw_job - ej)), ej
    ).astype(np.float32)
    gap_grp = np.where(
        judged & ~np.isnan(raw_grp),
        np.where(np.isnan(eg), raw_grp, eg + alpha * (raw_grp - eg)),
        eg,
    ).astype(np.float32)
    with np.errstate(invalid="ignore"):
        busy = judged.copy()
        if util is not None:
            busy &= np.nan_to_num(util, nan=100.0) >= params.busy_util
        elevated = busy & (gap_job >= params.min_gap)
    outliers = np.bincount(jid[elevated], minlength=n_jobs)
    comparable = gsize >= params.min_group_gpus
    stands_out = np.where(
        comparable, gap_grp >= params.min_gap, outliers[jsafe] <= params.max_outliers
    )
    flagged = elevated & stands_out
    clk_med = np.full(n, np.nan)
    if clock is not None:
        cmed = group_median(clock, np.where(busy, jid, NO_INDEX).astype(np.int32), n_jobs)
        clk_med = np.where(valid, cmed[jsafe], np.nan)
        with np.errstate(invalid="ignore"):
            flagged |= busy & (clock <= (1.0 - params.clock_drop) * clk_med)
    # Stage imbalance: the node's group of this job stands out as a whole.
    with np.errstate(invalid="ignore"):
        group_flag = judged & comparable & ((gmed - med) / med >= params.min_gap) & ~flagged

    acc = np.where(judged, persist(cur["acc"], flagged, dt, params.min_seconds), cur["acc"]).astype(
        np.float32
    )
    active = hysteresis(acc, ~np.isnan(cur["onset"]), params.min_seconds)
    onset = np.where(active, np.fmin(cur["onset"], now - acc.astype(np.float64)), np.nan)
    gacc = np.where(
        judged, persist(cur["gacc"], group_flag, dt, params.min_seconds), cur["gacc"]
    ).astype(np.float32)
    gactive = hysteresis(gacc, ~np.isnan(cur["gonset"]), params.min_seconds) & ~active
    gonset = np.where(gactive, np.fmin(cur["gonset"], now - gacc.astype(np.float64)), np.nan)

    power = value(snapshot, POWER, now, age)
    findings: list[Finding] = []
    for i in np.flatnonzero(active):
        j = int(g.job_index[i])
        if j < 0:
            continue
        ctx = gpu_context(snapshot, int(i))
        node = node_name(snapshot, int(g.node_index[i]))
        job = str(snapshot.jobs[j].key)
        pod = int(g.pod_index[i])
        rank = snapshot.pods[pod].rank if 0 <= pod < len(snapshot.pods) else NO_INDEX
        findings.append(
            Finding(
                kind=FindingKind.STRAGGLER,
                severity=Severity.WARNING,
                summary=(
                    f"GPU {g.device_index[i]} on {node} paces job {job}: activity "
                    f"{float(act[i]):.2f} vs peers' median {float(med[i]):.2f}"
                ),
                first_seen=float(onset[i]),
                last_seen=now,
                node=node,
                gpu_uuid=str(g.uuid[i]),
                job=job,
                evidence={
                    **ctx,
                    "rank": None if rank == NO_INDEX else int(rank),
                    "signal": signal[int(g.job_index[i])],
                    "activity": round(float(act[i]), 3),
                    "job_median_activity": round(float(med[i]), 3),
                    "node_peers_median_activity": None
                    if np.isnan(gmed[i])
                    else round(float(gmed[i]), 3),
                    "sm_clock_mhz": None if clock is None else float(clock[i]),
                    "job_median_sm_clock_mhz": None if np.isnan(clk_med[i]) else float(clk_med[i]),
                    "power_w": None if power is None else float(power[i]),
                    "peers": int(job_n[j]),
                    "min_gap": params.min_gap,
                    "persisted_s": round(float(acc[i]), 1),
                },
                recommended_action=ACTION,
            )
        )
    seen: set[tuple[int, int]] = set()
    for i in np.flatnonzero(gactive):
        key = (int(g.job_index[i]), int(g.node_index[i]))
        if key in seen or key[0] < 0:
            continue
        seen.add(key)
        node = node_name(snapshot, key[1])
        job = str(snapshot.jobs[key[0]].key)
        findings.append(
            Finding(
                kind=FindingKind.STRAGGLER,
                severity=Severity.INFO,
                summary=(
                    f"job {job}: its GPUs on {node} are uniformly busier than the rest "
                    f"({float(gmed[i]):.2f} vs {float(med[i]):.2f}): stage or data imbalance, "
                    "not a bad GPU"
                ),
                first_seen=float(gonset[i]),
                last_seen=now,
                node=node,
                job=job,
                evidence={
                    "group_median_activity": round(float(gmed[i]), 3),
                    "job_median_activity": round(float(med[i]), 3),
                    "group_gpus": int(gsize[i]),
                    "persisted_s": round(float(gacc[i]), 1),
                },
                recommended_action="rebalance the job's pipeline stages or data sharding",
            )
        )
    new = cur.replace(
        acc=acc,
        onset=onset,
        gacc=gacc,
        gonset=gonset,
        peak=peak,
        gap_job=gap_job,
        gap_grp=gap_grp,
    )
    return findings, State(new, now)


SPEC = register(
    DetectorSpec(
        name="straggler",
        params_type=Params,
        detect=detect,
        kinds=(FindingKind.STRAGGLER,),
        doc="A GPU persistently pacing its job (busy while peers wait, or clock-limited).",
    )
)
