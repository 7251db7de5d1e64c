"""nccl_hang: every rank of a job stalled in a collective, found from DCGM in about a minute.

When one rank dies or deadlocks, every other rank blocks in NCCL: a spin kernel stays resident,
so GPU utilisation (time with a kernel resident) stays pinned near 100 %, while no real math runs
— tensor pipe near 0, NVLink traffic near 0, power near idle. Static rules on utilisation never
see it, and PyTorch's watchdog waits 10 minutes. The signature must hold on (nearly) every fresh
GPU of the job (NVLink traffic is reported as evidence but not required: its counter increase
spans the collector's window, which still holds pre-hang traffic for a minute or two); where
the job exports `training_steps_total`, flat steps confirm it sooner, and steps that keep
rising over a whole window spent in the signature rule it out. Look-alikes that stay
quiet: checkpoints (utilisation drops too), evaluation phases (tensor work continues at a lower
rate), start-up (utilisation 0 until the first kernel).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from detectors.base import DetectorSpec, Needs
from detectors.findings import Finding, FindingKind, Severity
from detectors.job_members import by_job_member
from detectors.signals import (
    GR_ACTIVE,
    NVLINK_BW,
    POWER,
    TENSOR_ACTIVE,
    UTIL,
    column,
    dt_since,
    group_median,
    persist,
    scrape_interval,
    value,
)
from detectors.state import KeyedArrays, align, job_keys
from observer.fleet.model import NO_INDEX, FleetSnapshot

ACTION = (
    "dump the ranks' stacks (py-spy dump, NCCL_DEBUG=INFO), then restart the job from its last "
    "checkpoint; look for the rank whose GPU or host shows XID/NVLink/network errors"
)


@dataclass(frozen=True, slots=True)
class Params:
    util_pinned: float = 90.0
    """A resident NCCL spin kernel keeps utilisation >= 90 %."""
    compute_idle: float = 0.05
    """Tensor pipe <= 5 %: no math is running (where it is not collected, power alone says so).
    Evaluation keeps ~30 % tensor activity, real training 40-70 %."""
    power_fraction: float = 0.5
    """Power <= half of the job's own computing power (its learned baseline): a spin kernel
    draws near-idle power, real work does not. Skipped until a baseline is known."""
    ranks_fraction: float = 0.9
    """Share of the job's fresh GPUs that must show the signature: a hang stalls every rank."""
    min_coverage: float = 0.5
    """At least half of the job's GPUs must be fresh to judge it (exporter outages otherwise)."""
    min_seconds: float = 60.0
    """Signature held for a minute (two 30 s scrapes): a collective that merely waits on a slow
    rank lasts milliseconds to seconds."""
    min_seconds_with_steps: float = 30.0
    """With training steps flat over the collector's window, one scrape of signature suffices."""
    steps_window_seconds: float = 120.0
    """Window of the collector's `training_steps_total` increase when the snapshot does not
    carry it. Steps that still rose over a whole window spent in the signature mean progress
    (a workload without tensor math): the stall resets. Within the first window, rising steps
    are inconclusive (pre-hang steps) and the DCGM rule alone decides."""
    baseline_alpha: float = 0.2
    """EWMA weight of the job's computing power/NVLink baseline per cycle."""
    max_age_intervals: float = 2.5


@dataclass(frozen=True, slots=True)
class State:
    jobs: KeyedArrays
    last_now: float

    def nbytes(self) -> int:
        return self.jobs.nbytes()


_SPEC = {
    "acc": (np.float32, 0.0),
    "onset": (np.float64, np.nan),
    "since": (np.float64, np.nan),
    "power": (np.float32, np.nan),
    "nvlink": (np.float32, np.nan),
}


@dataclass(frozen=True, slots=True)
class _JobReadings:
    """Evidence, step 1: each GPU's readings and its job (rows in snapshot order)."""

    util: np.ndarray
    compute: np.ndarray | None
    """Tensor pipe activity (None where it is not collected: the graphics engine cannot stand
    in, a resident spin kernel keeps it ~1.0 on real hardware)."""
    activity: np.ndarray | None
    """What says the job computes, to learn its power baseline: tensor, else the graphics
    engine, else utilisation (0..1)."""
    power: np.ndarray | None
    nvlink: np.ndarray | None
    job: np.ndarray
    """The GPU's job, NO_INDEX for GPUs outside jobs."""
    job_row: np.ndarray
    fresh: np.ndarray
    job_gpus: np.ndarray
    job_fresh: np.ndarray


@dataclass(frozen=True, slots=True)
class _Signature:
    """Evidence, step 2: which GPUs busy-spin with no compute, and which jobs are stalled."""

    job_spinning: np.ndarray
    judged: np.ndarray
    """The job has enough fresh GPUs to judge."""
    stalled: np.ndarray


@dataclass(frozen=True, slots=True)
class _Steps:
    """Evidence, step 3: training steps where the job exports them."""

    flat: np.ndarray
    moving: np.ndarray
    window: float


def _readings(
    snapshot: FleetSnapshot, now: float, age: float, params: Params
) -> _JobReadings | None:
    g = snapshot.gpus
    n_jobs = len(snapshot.jobs)
    util = value(snapshot, UTIL, now, age)
    if util is None or n_jobs == 0:
        return None
    compute = value(snapshot, TENSOR_ACTIVE, now, age)
    if compute is not None and np.all(np.isnan(compute)):
        compute = None
    activity = compute
    if activity is None:
        gr = value(snapshot, GR_ACTIVE, now, age)
        activity = gr if gr is not None and not np.all(np.isnan(gr)) else util / 100.0
    in_job = g.job_index >= 0
    job = np.where(in_job, g.job_index, NO_INDEX).astype(np.int32)
    fresh = in_job & ~np.isnan(util)
    return _JobReadings(
        util=util,
        compute=compute,
        activity=activity,
        power=value(snapshot, POWER, now, age),
        nvlink=value(snapshot, NVLINK_BW, now, age),
        job=job,
        job_row=np.clip(g.job_index, 0, n_jobs - 1),
        fresh=fresh,
        job_gpus=np.bincount(job[in_job], minlength=n_jobs),
        job_fresh=np.bincount(job[fresh], minlength=n_jobs),
    )


def _signature(r: _JobReadings, power_baseline: np.ndarray, params: Params) -> _Signature:
    n_jobs = len(r.job_gpus)
    spinning = r.fresh & (r.util >= params.util_pinned)
    if r.compute is not None:
        spinning &= np.nan_to_num(r.compute, nan=1.0) <= params.compute_idle
        if r.power is not None:
            with np.errstate(invalid="ignore"):  # an unknown baseline passes
                spinning &= ~(r.power > params.power_fraction * power_baseline[r.job_row])
    elif r.power is not None:
        # No tensor pipe: near-idle power against the job's learned computing power is the
        # only no-math evidence left, so a job whose baseline is not known yet is not judged.
        with np.errstate(invalid="ignore"):
            spinning &= r.power <= params.power_fraction * power_baseline[r.job_row]
    else:
        spinning &= False  # utilisation alone is every training job
    job_spinning = np.bincount(r.job[spinning], minlength=n_jobs)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(r.job_fresh > 0, job_spinning / np.maximum(r.job_fresh, 1), 0.0)
        coverage = np.where(r.job_gpus > 0, r.job_fresh / np.maximum(r.job_gpus, 1), 0.0)
    judged = (coverage >= params.min_coverage) & (r.job_fresh >= 1)
    return _Signature(job_spinning, judged, judged & (share >= params.ranks_fraction))


def _steps(snapshot: FleetSnapshot, params: Params) -> _Steps:
    n_jobs = len(snapshot.jobs)
    flat = np.zeros(n_jobs, dtype=bool)
    moving = np.zeros(n_jobs, dtype=bool)
    for j, job in enumerate(snapshot.jobs):  # per job, not per GPU
        inc = snapshot.job_steps_increase.get(job.key)
        if inc is not None and not np.isnan(inc):
            flat[j] = inc <= 0
            moving[j] = inc > 0
    window = params.steps_window_seconds
    steps_col = column(snapshot, "training_steps_total")
    if steps_col is not None and steps_col.window_seconds > 0:
        window = steps_col.window_seconds
    return _Steps(flat, moving, window)


def _learn_baselines(
    r: _JobReadings, stalled: np.ndarray, cur: KeyedArrays, params: Params
) -> tuple[np.ndarray, np.ndarray]:
    """Each job's computing power and NVLink baselines, learned while it clearly computes."""
    n_jobs = len(r.job_gpus)
    fresh_job = np.where(r.fresh, r.job, NO_INDEX).astype(np.int32)
    computing = np.zeros(n_jobs, dtype=bool)
    if r.activity is not None:
        computing = group_median(r.activity, fresh_job, n_jobs) >= 2 * params.compute_idle + 0.1
    alpha = params.baseline_alpha

    def learn(baseline: np.ndarray, reading: np.ndarray | None) -> np.ndarray:
        if reading is None:
            return baseline
        median = group_median(reading, fresh_job, n_jobs)
        update = computing & ~stalled & ~np.isnan(median)
        ewma = np.where(np.isnan(baseline), median, (1 - alpha) * baseline + alpha * median)
        return np.where(update, ewma, baseline).astype(np.float32)

    return learn(cur["power"], r.power), learn(cur["nvlink"], r.nvlink)


def detect(
    snapshot: FleetSnapshot, state: State | None, now: float, params: Params
) -> tuple[list[Finding], State]:
    snapshot = by_job_member(snapshot)  # a job on time-sliced GPUs only is watched too
    interval = scrape_interval(snapshot)
    age = params.max_age_intervals * interval
    cur = align(state.jobs if state else None, job_keys(snapshot), _SPEC)
    dt = dt_since(state.last_now if state else np.nan, now, interval)
    readings = _readings(snapshot, now, age, params)
    if readings is None:
        return [], State(cur, now)
    sig = _signature(readings, cur["power"], params)
    steps = _steps(snapshot, params)

    # Decision: the signature held long enough (sooner with flat steps), unless steps still
    # rose although the signature has held longer than their window (not hung).
    judged, stalled = sig.judged, sig.stalled
    held_acc = persist(cur["acc"], stalled, dt, params.min_seconds)
    acc = np.where(judged, held_acc, cur["acc"]).astype(np.float32)
    # How long the signature has held without a break (independent of the stall counter).
    since = np.where(
        stalled, np.fmin(cur["since"], now - dt), np.where(judged, np.nan, cur["since"])
    )
    held = now - np.fmin(since, now)
    # Rising steps within the first window of the signature are inconclusive (the window still
    # holds pre-hang steps): the DCGM rule alone decides then, as for jobs without steps.
    progressing = steps.moving & (held > steps.window + interval)
    acc = np.where(progressing, 0.0, acc).astype(np.float32)
    need = np.where(steps.flat, params.min_seconds_with_steps, params.min_seconds)
    active = ((acc >= need) | (~np.isnan(cur["onset"]) & (acc > 0))) & ~progressing
    onset = np.where(active, np.fmin(cur["onset"], now - acc.astype(np.float64)), np.nan)
    new_power, new_nvlink = _learn_baselines(readings, stalled, cur, params)

    findings = [
        _finding(snapshot, now, int(j), float(onset[j]), readings, sig, cur["power"])
        for j in np.flatnonzero(active)
    ]
    new = cur.replace(acc=acc, onset=onset, since=since, power=new_power, nvlink=new_nvlink)
    return findings, State(new, now)


def _finding(
    snapshot: FleetSnapshot,
    now: float,
    j: int,
    onset: float,
    r: _JobReadings,
    sig: _Signature,
    power_baseline: np.ndarray,
) -> Finding:
    """Output: the critical finding for job `j`, with the readings that show the stall."""
    g = snapshot.gpus
    job = snapshot.jobs[j]
    members = np.flatnonzero(g.job_index == j)
    nodes = sorted({snapshot.nodes[k].name for k in np.unique(g.node_index[members]) if k >= 0})
    spinning, fresh = int(sig.job_spinning[j]), int(r.job_fresh[j])
    return Finding(
        kind=FindingKind.NCCL_HANG,
        severity=Severity.CRITICAL,
        summary=(
            f"job {job.key} looks hung in a collective for {now - onset:.0f}s: "
            f"{spinning}/{fresh} GPUs busy-spinning with no compute"
        ),
        first_seen=onset,
        last_seen=now,
        job=str(job.key),
        evidence={
            "gpus_with_signature": spinning,
            "gpus_fresh": fresh,
            "gpus_total": int(r.job_gpus[j]),
            "util_median": _median(r.util, members),
            "compute_median": None if r.compute is None else _median(r.compute, members),
            "power_median_w": None if r.power is None else _median(r.power, members),
            "power_baseline_w": None
            if np.isnan(power_baseline[j])
            else round(float(power_baseline[j]), 1),
            "steps_increase": snapshot.job_steps_increase.get(job.key),
            "stalled_s": round(float(now - onset), 1),
            "nvlink_mib_per_s": None if r.nvlink is None else _median(r.nvlink, members),
            "nodes": nodes[:16],
        },
        recommended_action=ACTION,
    )


def _median(values: np.ndarray, rows: np.ndarray) -> float | None:
    v = values[rows]
    v = v[~np.isnan(v)]
    return round(float(np.median(v)), 3) if v.size else None


NEEDS = Needs(
    ((UTIL,),),
    (UTIL, TENSOR_ACTIVE, POWER),
    {
        TENSOR_ACTIVE: "no tensor pipe: no-compute read from near-idle power against the job's "
        "learned computing power (the graphics engine cannot say: a spin kernel keeps it busy); "
        "a job already hung when first seen is not judged",
        POWER: "no power: the spin kernel's near-idle draw is not checked",
    },
    {TENSOR_ACTIVE: (POWER, GR_ACTIVE), POWER: (UTIL,)},
)
"""The fields this detector reads, for detectors.coverage: what it needs to run at all,
what full evidence is, and what it infers from when a field is missing."""


SPEC = DetectorSpec(
    needs=NEEDS,
    name="nccl_hang",
    params_type=Params,
    detect=detect,
    kinds=(FindingKind.NCCL_HANG,),
    severities=(Severity.CRITICAL,),
    doc="Every rank busy-spinning with no compute (steps flat where exported).",
)
