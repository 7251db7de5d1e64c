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

from detectors.base import DetectorSpec
from detectors.findings import Finding, FindingKind, Severity
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
    rate,
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
    """Tensor pipe (graphics engine where tensor is not collected) <= 5 %: no math is running.
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


def detect(
    snapshot: FleetSnapshot, state: State | None, now: float, params: Params
) -> tuple[list[Finding], State]:
    g = snapshot.gpus
    nj = len(snapshot.jobs)
    interval = scrape_interval(snapshot)
    age = params.max_age_intervals * interval
    cur = align(state.jobs if state else None, job_keys(snapshot), _SPEC)
    dt = dt_since(state.last_now if state else np.nan, now, interval)
    util = value(snapshot, UTIL, now, age)
    if util is None or nj == 0:
        return [], State(cur, now)
    compute = value(snapshot, TENSOR_ACTIVE, now, age)
    if compute is None or np.all(np.isnan(compute)):
        compute = value(snapshot, GR_ACTIVE, now, age)
    power = value(snapshot, POWER, now, age)
    nvl = rate(snapshot, NVLINK_BW, now, age)
    in_job = g.job_index >= 0
    jid = np.where(in_job, g.job_index, NO_INDEX).astype(np.int32)
    jsafe = np.clip(g.job_index, 0, nj - 1)
    fresh = in_job & ~np.isnan(util)
    total = np.bincount(jid[in_job], minlength=nj)
    n_fresh = np.bincount(jid[fresh], minlength=nj)

    sig = fresh & (util >= params.util_pinned)
    if compute is not None:
        sig &= np.nan_to_num(compute, nan=1.0) <= params.compute_idle
    base_p = cur["power"][jsafe]
    if power is not None:
        with np.errstate(invalid="ignore"):
            low = ~(power > params.power_fraction * base_p)  # unknown baseline passes
        sig &= low
    n_sig = np.bincount(jid[sig], minlength=nj)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(n_fresh > 0, n_sig / np.maximum(n_fresh, 1), 0.0)
        coverage = np.where(total > 0, n_fresh / np.maximum(total, 1), 0.0)
    judged = (coverage >= params.min_coverage) & (n_fresh >= 1)
    stalled = judged & (share >= params.ranks_fraction)

    steps_flat = np.zeros(nj, dtype=bool)
    steps_moving = np.zeros(nj, dtype=bool)
    window = params.steps_window_seconds
    for j, job in enumerate(snapshot.jobs):  # per job, not per GPU
        inc = snapshot.job_steps_increase.get(job.key)
        if inc is not None and not np.isnan(inc):
            steps_flat[j] = inc <= 0
            steps_moving[j] = inc > 0
    steps_col = column(snapshot, "training_steps_total")
    if steps_col is not None and steps_col.window_seconds > 0:
        window = steps_col.window_seconds

    acc = np.where(judged, persist(cur["acc"], stalled, dt, params.min_seconds), cur["acc"]).astype(
        np.float32
    )
    # Steps that still rose although the signature has held longer than their window: not hung.
    # How long the signature has held without a break (independent of the stall counter).
    since = np.where(
        stalled, np.fmin(cur["since"], now - dt), np.where(judged, np.nan, cur["since"])
    )
    held = now - np.fmin(since, now)
    # Rising steps within the first window of the signature are inconclusive (the window still
    # holds pre-hang steps): the DCGM rule alone decides then, as for jobs without steps.
    progressing = steps_moving & (held > window + interval)
    acc = np.where(progressing, 0.0, acc).astype(np.float32)
    need = np.where(steps_flat, params.min_seconds_with_steps, params.min_seconds)
    active = ((acc >= need) | (~np.isnan(cur["onset"]) & (acc > 0))) & ~progressing
    onset = np.where(active, np.fmin(cur["onset"], now - acc.astype(np.float64)), np.nan)

    # Learn each job's computing baseline while it clearly computes (not stalled).
    computing = np.zeros(nj, dtype=bool)
    if compute is not None:
        cmed = group_median(compute, np.where(fresh, jid, NO_INDEX).astype(np.int32), nj)
        computing = cmed >= 2 * params.compute_idle + 0.1
    a = params.baseline_alpha
    new_power, new_nvl = cur["power"], cur["nvlink"]
    if power is not None:
        pmed = group_median(power, np.where(fresh, jid, NO_INDEX).astype(np.int32), nj)
        upd = computing & ~stalled & ~np.isnan(pmed)
        new_power = np.where(
            upd, np.where(np.isnan(new_power), pmed, (1 - a) * new_power + a * pmed), new_power
        ).astype(np.float32)
    if nvl is not None:
        nmed = group_median(nvl, np.where(fresh, jid, NO_INDEX).astype(np.int32), nj)
        upd = computing & ~stalled & ~np.isnan(nmed)
        new_nvl = np.where(
            upd, np.where(np.isnan(new_nvl), nmed, (1 - a) * new_nvl + a * nmed), new_nvl
        ).astype(np.float32)

    findings: list[Finding] = []
    for jpos in np.flatnonzero(active):
        j = int(jpos)
        job = snapshot.jobs[j]
        members = np.flatnonzero(g.job_index == j)
        nodes = sorted({snapshot.nodes[k].name for k in np.unique(g.node_index[members]) if k >= 0})
        findings.append(
            Finding(
                kind=FindingKind.NCCL_HANG,
                severity=Severity.CRITICAL,
                summary=(
                    f"job {job.key} looks hung in a collective for {now - onset[j]:.0f}s: "
                    f"{int(n_sig[j])}/{int(n_fresh[j])} GPUs busy-spinning with no compute"
                ),
                first_seen=float(onset[j]),
                last_seen=now,
                job=str(job.key),
                evidence={
                    "gpus_with_signature": int(n_sig[j]),
                    "gpus_fresh": int(n_fresh[j]),
                    "gpus_total": int(total[j]),
                    "util_median": _median(util, members),
                    "compute_median": None if compute is None else _median(compute, members),
                    "power_median_w": None if power is None else _median(power, members),
                    "power_baseline_w": None
                    if np.isnan(cur["power"][j])
                    else round(float(cur["power"][j]), 1),
                    "steps_increase": snapshot.job_steps_increase.get(job.key),
                    "stalled_s": round(float(now - onset[j]), 1),
                    "nvlink_bytes_per_s": None if nvl is None else _median(nvl, members),
                    "nodes": nodes[:16],
                },
                recommended_action=ACTION,
            )
        )
    new = cur.replace(acc=acc, onset=onset, since=since, power=new_power, nvlink=new_nvl)
    return findings, State(new, now)


def _median(values: np.ndarray, rows: np.ndarray) -> float | None:
    v = values[rows]
    v = v[~np.isnan(v)]
    return round(float(np.median(v)), 3) if v.size else None


SPEC = DetectorSpec(
    name="nccl_hang",
    params_type=Params,
    detect=detect,
    kinds=(FindingKind.NCCL_HANG,),
    doc="Every rank busy-spinning with no compute (steps flat where exported).",
)
