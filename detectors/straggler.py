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

from detectors.base import DetectorSpec, Needs
from detectors.findings import Finding, FindingKind, Severity
from detectors.job_members import by_job_member, member_keys
from detectors.signals import (
    GR_ACTIVE,
    POWER,
    SM_CLOCK,
    TENSOR_ACTIVE,
    UTIL,
    cusum,
    dt_since,
    group_median,
    group_median_others,
    hysteresis,
    scrape_interval,
    value,
)
from detectors.state import GpuCycleState, KeyedArrays, align
from detectors.straggler_evidence import group_ids, job_signal, noise_threshold
from detectors.straggler_report import StragglerReport
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


@dataclass(frozen=True, slots=True)
class _JobPeers:
    """Evidence, step 1: each GPU's activity beside its job's (rows in snapshot order)."""

    activity: np.ndarray
    signal: list[str]
    """Per job: which reading stands for "doing math" (tensor, graphics or util)."""
    util: np.ndarray | None
    clock: np.ndarray | None
    valid: np.ndarray
    job: np.ndarray
    """The GPU's job where it has a reading, NO_INDEX elsewhere."""
    job_row: np.ndarray
    """The GPU's job clipped into range, for indexing per-job arrays."""
    job_gpus: np.ndarray
    job_median: np.ndarray
    peak: np.ndarray
    judged: np.ndarray
    """The job is large enough, computing, and in its main compute phase."""


@dataclass(frozen=True, slots=True)
class _NodeMates:
    """Evidence, step 2: each GPU beside its job's other GPUs on the same node."""

    group_median: np.ndarray
    group_size: np.ndarray
    mates_median: np.ndarray
    """Median of the node-mates without the GPU itself."""
    comparable: np.ndarray


@dataclass(frozen=True, slots=True)
class _Evidence:
    """Evidence, step 3: the clipped per-scrape gap each GPU adds, and its noise threshold."""

    gap: np.ndarray
    """Clipped gap, counting a clock-limited busy GPU as the largest one scrape may carry."""
    busy: np.ndarray
    clock_median: np.ndarray
    threshold: np.ndarray
    job_sd: np.ndarray
    jump_sd: np.ndarray
    last_gap: np.ndarray


def _job_peers(
    snapshot: FleetSnapshot, cur: KeyedArrays, now: float, age: float, params: Params
) -> _JobPeers | None:
    g = snapshot.gpus
    n_jobs = len(snapshot.jobs)
    util = value(snapshot, UTIL, now, age)
    job_row = np.clip(g.job_index, 0, max(n_jobs - 1, 0))
    activity, signal = job_signal(snapshot, now, age, util, job_row, n_jobs, params.tensor_floor)
    if activity is None or n_jobs == 0 or len(g) == 0:
        return None
    clock = value(snapshot, SM_CLOCK, now, age)
    valid = (g.job_index >= 0) & ~np.isnan(activity)
    job = np.where(valid, g.job_index, NO_INDEX).astype(np.int32)
    job_gpus = np.bincount(job[valid], minlength=n_jobs)
    job_median = np.where(valid, group_median(activity, job, n_jobs)[job_row], np.nan)
    job_max = np.full(n_jobs, np.nan)
    np.fmax.at(job_max, job[valid], activity[valid])
    busiest = np.where(valid, job_max[job_row], np.nan)
    decayed_peak = cur["peak"] * params.peak_decay
    peak = np.where(valid, np.fmax(busiest, decayed_peak), cur["peak"]).astype(np.float32)
    with np.errstate(invalid="ignore"):
        main_phase = busiest >= params.main_phase * peak
    judged = (
        valid
        & (job_gpus[job_row] >= params.min_job_gpus)
        & (job_median >= params.job_active)
        & main_phase
    )
    return _JobPeers(
        activity, signal, util, clock, valid, job, job_row, job_gpus, job_median, peak, judged
    )


def _node_mates(snapshot: FleetSnapshot, peers: _JobPeers, params: Params) -> _NodeMates:
    g = snapshot.gpus
    gid, n_groups = group_ids(g.job_index, g.node_index, peers.valid)
    grp_n = np.bincount(gid[gid >= 0], minlength=n_groups)
    grp_med = group_median(peers.activity, gid, n_groups)
    gsafe = np.clip(gid, 0, max(n_groups - 1, 0))
    group_median_ = np.where(gid >= 0, grp_med[gsafe] if n_groups else np.nan, np.nan)
    group_size = np.where(gid >= 0, grp_n[gsafe] if n_groups else 0, 0)
    mates = group_median_others(peers.activity, gid, n_groups)
    return _NodeMates(group_median_, group_size, mates, group_size >= params.min_group_gpus)


def _evidence(
    peers: _JobPeers,
    mates: _NodeMates,
    cur: KeyedArrays,
    dt: float,
    interval: float,
    params: Params,
) -> _Evidence:
    n_jobs = len(peers.job_gpus)
    med = peers.job_median
    with np.errstate(invalid="ignore", divide="ignore"):
        gap_job = (peers.activity - med) / med
        gap_mates = (peers.activity - mates.mates_median) / mates.mates_median
    busy = peers.judged.copy()
    if peers.util is not None:
        with np.errstate(invalid="ignore"):
            busy &= np.nan_to_num(peers.util, nan=100.0) >= params.busy_util
    # Per-scrape evidence: the gap to the job, or to the node-mates if smaller; clipped so one
    # reading weighs at most `clip`; a GPU that is not busy is no evidence for.
    clip = params.clip
    gap = np.where(mates.comparable, np.fmin(gap_job, gap_mates), gap_job)
    clipped = np.clip(gap, -clip, clip)
    activity_gap = np.where(busy, clipped, np.fmin(clipped, 0.0))
    scrape_gap = activity_gap
    clock_median = np.full(len(peers.activity), np.nan)
    if peers.clock is not None:
        busy_job = np.where(busy, peers.job, NO_INDEX).astype(np.int32)
        per_job = group_median(peers.clock, busy_job, n_jobs)
        clock_median = np.where(peers.valid, per_job[peers.job_row], np.nan)
        with np.errstate(invalid="ignore"):
            clock_limited = busy & (peers.clock <= (1.0 - params.clock_drop) * clock_median)
        scrape_gap = np.where(clock_limited, clip, activity_gap)
    threshold, job_sd, jump_sd, last_gap = noise_threshold(
        cur,
        gap_job,
        activity_gap,
        busy,
        peers.judged,
        peers.job,
        peers.job_row,
        n_jobs,
        dt,
        interval,
        params.threshold,
        (params.noise_sd, params.noise_seconds, params.jump_seconds),
    )
    return _Evidence(scrape_gap, busy, clock_median, threshold, job_sd, jump_sd, last_gap)


def detect(
    snapshot: FleetSnapshot, state: State | None, now: float, params: Params
) -> tuple[list[Finding], State]:
    view = by_job_member(snapshot)  # a shared GPU is compared within each job holding it
    interval = scrape_interval(view)
    age = params.max_age_intervals * interval
    cur = align(state.gpus if state else None, member_keys(view, snapshot), _SPEC)
    snapshot = view
    dt = dt_since(state.last_now if state else np.nan, now, interval)
    peers = _job_peers(snapshot, cur, now, age, params)
    if peers is None:
        return [], State(cur, now)
    mates = _node_mates(snapshot, peers, params)
    evidence = _evidence(peers, mates, cur, dt, interval, params)

    # Decision, a bad GPU: its CUSUM past its threshold; where node-mates cannot be compared,
    # only if few of its job's GPUs are gathering evidence too (several at once are a slow
    # group: stage imbalance).
    k, h = params.reference, evidence.threshold
    judged_gap = np.where(peers.judged, evidence.gap, np.nan)
    ev, since = cusum(cur["ev"], judged_gap, dt, k, h, cur["since"], now)
    n_jobs = len(peers.job_gpus)
    gathering = np.bincount(peers.job[peers.valid & (ev >= h / 2.0)], minlength=n_jobs)
    stands_out = mates.comparable | (gathering[peers.job_row] <= params.max_outliers)
    was_active = ~np.isnan(cur["onset"])
    active = hysteresis(ev, was_active, h) & (was_active | stands_out)
    onset = np.where(active, np.fmin(cur["onset"], since), np.nan)

    # Decision, stage imbalance: the node's group of this job stands out from the job as a whole.
    med = peers.job_median
    with np.errstate(invalid="ignore", divide="ignore"):
        group_gap = np.clip((mates.group_median - med) / med, -params.clip, params.clip)
    hg = params.threshold
    judged_group_gap = np.where(peers.judged & mates.comparable, group_gap, np.nan)
    gev, gsince = cusum(cur["gev"], judged_group_gap, dt, k, hg, cur["gsince"], now)
    group_active = hysteresis(gev, ~np.isnan(cur["gonset"]), hg) & ~active
    gonset = np.where(group_active, np.fmin(cur["gonset"], gsince), np.nan)

    # Output.
    watts = value(snapshot, POWER, now, age)
    report = StragglerReport(
        snapshot=snapshot,
        now=now,
        min_gap=params.min_gap,
        activity=peers.activity,
        signal=peers.signal,
        job_median=med,
        job_gpus=peers.job_gpus,
        mates_median=mates.mates_median,
        group_median=mates.group_median,
        group_size=mates.group_size,
        clock=peers.clock,
        clock_median=evidence.clock_median,
        watts=watts,
        evidence=ev,
        threshold=h,
        job_sd=evidence.job_sd,
        group_evidence=gev,
    )
    findings = report.bad_gpus(active, onset, ACTION) + report.slow_groups(group_active, gonset)
    new = cur.replace(
        ev=ev,
        since=since,
        onset=onset,
        gev=gev,
        gsince=gsince,
        gonset=gonset,
        peak=peers.peak,
        sd=evidence.job_sd.astype(np.float32),
        msd=evidence.jump_sd.astype(np.float32),
        last=evidence.last_gap.astype(np.float32),
    )
    return findings, State(new, now)


NEEDS = Needs(
    ((TENSOR_ACTIVE, GR_ACTIVE, UTIL),),
    (TENSOR_ACTIVE, GR_ACTIVE, UTIL, SM_CLOCK),
    {
        TENSOR_ACTIVE: "no tensor pipe: compares graphics-engine activity (or utilisation), "
        "which waiting ranks also keep up, so fewer stragglers stand out",
        GR_ACTIVE: "no graphics engine: falls back to utilisation where tensor is unused",
        UTIL: "busy test skipped",
        SM_CLOCK: "clock-limited GPUs unseen",
    },
    {
        TENSOR_ACTIVE: (GR_ACTIVE, UTIL, SM_CLOCK),
        GR_ACTIVE: (UTIL,),
        UTIL: (),
        SM_CLOCK: (),
    },
)
"""The fields this detector reads, for detectors.coverage: what it needs to run at all,
what full evidence is, and what it infers from when a field is missing."""


SPEC = DetectorSpec(
    needs=NEEDS,
    name="straggler",
    params_type=Params,
    detect=detect,
    kinds=(FindingKind.STRAGGLER,),
    severities=(Severity.WARNING, Severity.INFO),
    doc="A GPU persistently pacing its job (busy while peers wait, or clock-limited).",
)
