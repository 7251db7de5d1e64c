"""straggler: within a job, one GPU persistently slower than its peers (the others wait for it).

In synchronous training every rank meets every other at each collective, so a slow GPU sets the
pace: it stays busy while its peers finish early and wait in NCCL. Waiting ranks spin inside
NCCL kernels, which keeps their utilisation (and graphics-engine activity) up, but their tensor
pipe idles; so per scrape the straggler reads as tensor activity (graphics engine for jobs that
do not use tensor cores) well above the job's median, relative to it, while the job is in its
main compute phase — or as an SM clock well below the job's (a clock-limited GPU). Two
look-alikes must stay quiet:
- imbalance that rotates among ranks (sequence-length variance): each rank is the busiest only
  now and then, so its mean gap is ~0 and its evidence (below) drifts back to zero;
- a whole parallel group uniformly busier (a heavier pipeline stage on one node): each GPU is
  compared with its node-mates in the job too, and only a GPU that stands out from them is a bad
  GPU; a group that stands out is reported once, as job-level info (entity job + node).
Evidence is Page's one-sided CUSUM on the per-scrape gap, integrated over seconds (signals.cusum):
S <- max(0, S + dt*(gap - k)), fire at S >= h. It weighs evidence by time, so 15 s and 30 s
scrapes need the same time; a noisy scrape just under the limit costs only its shortfall instead
of resetting progress; each scrape's gap is clipped (Huber) so that no GPU fires on less than
`min_seconds` of evidence, however large one reading. Rows whose data is stale, and jobs that are
not computing (checkpoint, hang, evaluation), hold their evidence.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from detectors.base import DetectorSpec, gpu_context, node_name
from detectors.findings import Finding, FindingKind, Severity
from detectors.signals import (
    POWER,
    SM_CLOCK,
    UTIL,
    cusum,
    dt_since,
    group_median,
    group_median_others,
    hysteresis,
    scrape_interval,
    value,
)
from detectors.state import GpuCycleState, align, gpu_keys
from detectors.straggler_evidence import group_ids, job_signal, noise_threshold
from observer.fleet.model import NO_INDEX, FleetSnapshot

ACTION = (
    "run DCGM diag (level 2) on the GPU at the next checkpoint; if it fails or the straggler "
    "persists, cordon the node and restart the job without it"
)


@dataclass(frozen=True, slots=True)
class Params:
    min_gap: float = 0.07
    """Detection limit: relative activity gap to the job's median (and to its node-mates) of the
    pacing rank. A rank s slower makes its peers wait s/(1+s) of each step, so their activity
    drops by that share and the slow rank reads s above them: 25 % slower gives a gap of 0.25,
    10 % slower 0.10; 0.07 puts the limit near 7 % slower. The CUSUM's reference value is half of
    it (Page's textbook k = shift/2): a healthy rank (mean gap ~0, per-scrape sd ~0.03; the
    slowest healthy rank of a large job a few percent) drifts down at >= 0.035 per second, a rank
    at the limit climbs at 0.035 per second."""
    tensor_floor: float = 0.05
    """Use the tensor pipe as the job's signal when its median is at least 5 % (the job uses
    tensor cores); else the graphics engine."""
    busy_util: float = 50.0
    """The straggler is busy: utilisation >= 50 % (a GPU below that is no evidence for)."""
    job_active: float = 0.1
    """Judge a job only while it computes (median signal >= 0.1): not during checkpoints,
    hangs or start-up, where ranks legitimately differ."""
    main_phase: float = 0.85
    """...and only in its main compute phase: the job's busiest GPU at >= 85 % of the job's own
    recent peak. Evaluation and other lighter phases lower every rank; a straggler lowers only
    its peers (they wait) and stays at the peak itself. Evidence holds through lighter phases."""
    peak_decay: float = 0.995
    """Per-cycle decay of that remembered peak (half-life ~70 cycles, ~35 min at 30 s)."""
    clock_drop: float = 0.1
    """SM clock 10 % below the job's busy median also marks a GPU (same work, fewer cycles:
    >= 11 % slower); such a scrape counts as the largest evidence one scrape may carry."""
    min_job_gpus: int = 4
    """Peer comparison needs at least 4 fresh GPUs in the job."""
    min_group_gpus: int = 3
    """With >= 3 of the job's GPUs on a node, a GPU must also stand out from its node-mates:
    its evidence is the smaller of its gap to the job and its gap to them."""
    max_outliers: int = 1
    """Where node-mates cannot be compared, at most this many GPUs per job may be gathering
    evidence (past half the threshold) when one fires; more is a group, i.e. stage imbalance."""
    limit_seconds: float = 240.0
    """A straggler exactly at the detection limit is found after 4 min of observed training
    (noise-free): the threshold h = (min_gap - k) * 240 s = 8.4 gap-seconds. One minute short of
    the 5-minute target, for scrape alignment and noise around the limit. A 10 % slow rank
    (gap 0.10) needs ~130 s, a 5 % one (below the limit, above k) ~9 min."""
    noise_sd: float = 0.035
    """Per-scrape sd of a healthy rank's gap, at 30 s scrapes, that h is sized for: healthy ranks
    of one job agree within ~3 % per scrape. There h is 8 sd of one scrape and k one sd:
    Siegmund's approximation puts the false-alarm run length at ~5e7 scrapes per GPU (decades at
    30 s; the clip only lengthens it). Noisier
    gaps (sequence-length imbalance spreads ranks per scrape; a rank that is the busiest only
    now and then jumps) get h scaled by their noise power sd^2 * interval relative to this one
    (the leading term of Siegmund's h for a fixed run length), so they stay as quiet and are
    judged more slowly. The sd is the larger of the job's spread across ranks and the GPU's own
    scrape-to-scrape variation, each smoothed (straggler_evidence.noise_threshold)."""
    noise_seconds: float = 300.0
    """Smoothing of the job's spread: 5 min, ~10 scrapes of 16+ ranks each, a stable estimate."""
    jump_seconds: float = 600.0
    """Smoothing of the GPU's own scrape-to-scrape variation: 10 min (~20 readings at 30 s), so
    that the design noise is not mistaken for more, while a rank that was the busiest in a burst
    of scrapes carries the jumps into and out of it for minutes."""
    min_seconds: float = 120.0
    """Minimum persistence: each scrape's gap is clipped to k + h/min_seconds = 0.105 (Huber), so
    no GPU fires on less than 2 min of evidence (4 scrapes at 30 s, 8 at 15 s), however large one
    reading. Sequence-length imbalance moves between ranks from step to step (seconds); one rank
    pacing for 2 minutes straight is not rotation. The clip also bounds what one odd scrape (a
    phase edge, a late rank) can add or take away."""
    max_age_intervals: float = 2.5

    @property
    def reference(self) -> float:
        """Page's k: half the smallest shift to detect."""
        return self.min_gap / 2.0

    @property
    def threshold(self) -> float:
        """h, in gap-seconds."""
        return (self.min_gap - self.reference) * self.limit_seconds

    @property
    def clip(self) -> float:
        """The largest gap one scrape may count (the strongest straggler takes min_seconds)."""
        return self.reference + self.threshold / max(self.min_seconds, 1e-9)


State = GpuCycleState
_SPEC = {
    "ev": (np.float64, 0.0),
    "since": (np.float64, np.nan),
    "onset": (np.float64, np.nan),
    "gev": (np.float64, 0.0),
    "gsince": (np.float64, np.nan),
    "gonset": (np.float64, np.nan),
    "peak": (np.float32, np.nan),
    "sd": (np.float32, np.nan),
    "msd": (np.float32, np.nan),
    "last": (np.float32, np.nan),
}


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
    act, signal = job_signal(snapshot, now, age, util, jsafe, n_jobs, params.tensor_floor)
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

    gid, n_groups = group_ids(g.job_index, g.node_index, valid)
    grp_n = np.bincount(gid[gid >= 0], minlength=n_groups)
    grp_med = group_median(act, gid, n_groups)
    gsafe = np.clip(gid, 0, max(n_groups - 1, 0))
    gmed = np.where(gid >= 0, grp_med[gsafe] if n_groups else np.nan, np.nan)
    gsize = np.where(gid >= 0, grp_n[gsafe] if n_groups else 0, 0)
    mates = group_median_others(act, gid, n_groups)  # node-mates in the job, without itself

    with np.errstate(invalid="ignore", divide="ignore"):
        gap_job = (act - med) / med
        gap_grp = (act - mates) / mates
    comparable = gsize >= params.min_group_gpus
    busy = judged.copy()
    if util is not None:
        with np.errstate(invalid="ignore"):
            busy &= np.nan_to_num(util, nan=100.0) >= params.busy_util
    # Per-scrape evidence: the gap to the job, or to the node-mates if smaller; clipped so one
    # reading weighs at most `clip`; a GPU that is not busy is no evidence for.
    c = params.clip
    gap = np.where(comparable, np.fmin(gap_job, gap_grp), gap_job)
    x = np.clip(gap, -c, c)
    x = x_act = np.where(busy, x, np.fmin(x, 0.0))
    clk_med = np.full(n, np.nan)
    if clock is not None:
        cmed = group_median(clock, np.where(busy, jid, NO_INDEX).astype(np.int32), n_jobs)
        clk_med = np.where(valid, cmed[jsafe], np.nan)
        with np.errstate(invalid="ignore"):
            x = np.where(busy & (clock <= (1.0 - params.clock_drop) * clk_med), c, x)
    k = params.reference
    h, sd, msd, last = noise_threshold(
        cur,
        gap_job,
        x_act,
        busy,
        judged,
        jid,
        jsafe,
        n_jobs,
        dt,
        interval,
        params.threshold,
        (params.noise_sd, params.noise_seconds, params.jump_seconds),
    )
    ev, since = cusum(cur["ev"], np.where(judged, x, np.nan), dt, k, h, cur["since"], now)
    # Where node-mates cannot be compared, a GPU fires only if few of its job's GPUs are
    # gathering evidence too (several at once are a slow group: stage imbalance).
    gathering = np.bincount(jid[valid & (ev >= h / 2.0)], minlength=n_jobs)
    stands_out = comparable | (gathering[jsafe] <= params.max_outliers)
    was = ~np.isnan(cur["onset"])
    active = hysteresis(ev, was, h) & (was | stands_out)
    onset = np.where(active, np.fmin(cur["onset"], since), np.nan)
    # Stage imbalance: the node's group of this job stands out from the job as a whole.
    with np.errstate(invalid="ignore", divide="ignore"):
        xg = np.clip((gmed - med) / med, -c, c)
    hg = params.threshold
    gev, gsince = cusum(
        cur["gev"], np.where(judged & comparable, xg, np.nan), dt, k, hg, cur["gsince"], now
    )
    gactive = hysteresis(gev, ~np.isnan(cur["gonset"]), hg) & ~active
    gonset = np.where(gactive, np.fmin(cur["gonset"], gsince), np.nan)

    watts = value(snapshot, POWER, now, age)
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
                    if np.isnan(mates[i])
                    else round(float(mates[i]), 3),
                    "sm_clock_mhz": None if clock is None else float(clock[i]),
                    "job_median_sm_clock_mhz": None if np.isnan(clk_med[i]) else float(clk_med[i]),
                    "power_w": None if watts is None else float(watts[i]),
                    "peers": int(job_n[j]),
                    "min_gap": params.min_gap,
                    "persisted_s": round(now - float(onset[i]), 1),
                    "evidence_gap_s": round(float(ev[i]), 2),
                    "threshold_gap_s": round(float(h[i]), 2),
                    "job_scrape_sd": None if np.isnan(sd[i]) else round(float(sd[i]), 3),
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
                    "persisted_s": round(now - float(gonset[i]), 1),
                    "evidence_gap_s": round(float(gev[i]), 2),
                },
                recommended_action="rebalance the job's pipeline stages or data sharding",
            )
        )
    new = cur.replace(
        ev=ev,
        since=since,
        onset=onset,
        gev=gev,
        gsince=gsince,
        gonset=gonset,
        peak=peak,
        sd=sd.astype(np.float32),
        msd=msd.astype(np.float32),
        last=last.astype(np.float32),
    )
    return findings, State(new, now)


SPEC = DetectorSpec(
    name="straggler",
    params_type=Params,
    detect=detect,
    kinds=(FindingKind.STRAGGLER,),
    doc="A GPU persistently pacing its job (busy while peers wait, or clock-limited).",
)
