"""anomaly: multivariate outliers among peers, for faults the rules do not name (on, info only).

Each GPU's gauges are normalised against its peers (same GPU model and same job; without a job,
same model and namespace of the pod holding it, or free) by robust z-scores (median, MAD), so
a job's phase or a model's clocks do not look anomalous by themselves. An IsolationForest
(scikit-learn), fitted on a fixed-seed subsample every `refit_seconds` of fleet time or when the
peer population changes (detectors.anomaly_model), scores every GPU every cycle (reading only as
many trees as it takes to know its side of the threshold: detectors.anomaly_score); a GPU whose
score stays beyond `score_threshold` (or with one gauge beyond `z_limit` peer spreads) for
`min_seconds` is reported as info. On by default since issue 15: on
lab/suite/novel-faults-30s it finds 4 of 8 faults no rule names (3 that nothing else finds),
with no false flag there, on the other suite scenarios measured or on the held-out seeds
2000-2003; being info it cannot cost precision (docs/backtest.md, "faults no rule names"; its
cost per cycle is in docs/performance.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from detectors.anomaly_model import FittedForest, due, fit
from detectors.anomaly_score import row_abs_max
from detectors.base import DetectorSpec, Needs, gpu_context, node_name
from detectors.findings import Finding, FindingKind, Severity
from detectors.peer_spread import groups_median_mad
from detectors.signals import (
    DRAM_ACTIVE,
    GPU_TEMP,
    GR_ACTIVE,
    MEM_TEMP,
    NVLINK_BW,
    POWER,
    SM_CLOCK,
    TENSOR_ACTIVE,
    UTIL,
    dt_since,
    hysteresis,
    persist,
    scrape_interval,
    value,
)
from detectors.state import KeyedArrays, align, gpu_keys
from observer.fleet.model import FleetSnapshot, FloatArray

FB_USED = "DCGM_FI_DEV_FB_USED"
FEATURES = (
    UTIL, GR_ACTIVE, TENSOR_ACTIVE, DRAM_ACTIVE, SM_CLOCK, POWER, GPU_TEMP, MEM_TEMP, FB_USED,
)  # fmt: skip
FLOOR = (2.0, 0.02, 0.02, 0.02, 30.0, 10.0, 2.0, 2.0, 512.0)
"""Smallest spread per feature (its measurement noise), so identical peers do not divide by 0."""
IDLE_UTIL = 2.0
"""Utilisation at or below which a GPU outside a job counts as idle (gpu_idle's `idle_util`)."""
RATES = ((NVLINK_BW, 1000.0),)
"""Throughputs with their floor: NVLink in MiB/s (DCGM field 449, a rate that dcgm-exporter
types as a counter; 1000 MiB/s is ~1 GB/s). Unknown throughputs read as typical (z = 0) rather
than dropping the GPU: many fleets do not collect them."""


@dataclass(frozen=True, slots=True)
class Params:
    n_estimators: int = 50
    max_samples: int = 256
    score_threshold: float = -0.65
    """IsolationForest `score_samples` below this (shorter isolation paths than ~all peers)."""
    z_limit: float = 8.0
    """A GPU whose peer z-score on any one gauge or rate is beyond this is flagged too. The forest
    splits on a random feature, so a departure on one of ten features isolates slowly: measured on
    lab/suite/novel-faults-30s.yaml, a GPU whose NVLink traffic fell by 90 % (z = -31) scored
    -0.645, inside the threshold. 8 robust spreads is far beyond noise and normal rank imbalance."""
    min_peers: int = 8
    min_seconds: float = 300.0
    """Persistence: five minutes, as for stragglers."""
    seed: int = 0
    max_age_intervals: float = 2.5
    refit_seconds: float = 600.0
    """Fleet seconds between fits, on boundaries aligned to the epoch (issue 25: fitting every
    cycle was ~45 ms of a 1k-GPU cycle's ~48; docs/backtest.md has the findings side by side)."""
    refit_population_change: float = 0.1
    """Refit early when the GPUs it may be fitted on change by more than this share."""


@dataclass(frozen=True, slots=True)
class State:
    """Per-GPU persistence, and the forest in force with what it was fitted on."""

    gpus: KeyedArrays
    last_now: float
    model: FittedForest | None = None
    fits: int = 0
    """Forests fitted since the first cycle (for tests and self-telemetry)."""

    def nbytes(self) -> int:
        return self.gpus.nbytes()


_SPEC = {"acc": (np.float32, 0.0), "onset": (np.float64, np.nan)}


def _dense_ids(codes: np.ndarray) -> tuple[np.ndarray, int]:
    """(each code's rank among the distinct codes, how many there are), as
    `np.unique(codes, return_inverse=True)` gives them; by a table of the codes present when
    they are small non-negative integers (linear, not a sort of every GPU)."""
    if codes.size == 0 or int(codes.min()) < 0 or int(codes.max()) > 4 * codes.size:
        _, inverse = np.unique(codes, return_inverse=True)
        pid = inverse.astype(np.int32)
        return pid, int(pid.max(initial=-1)) + 1
    present = np.zeros(int(codes.max()) + 1, dtype=bool)
    present[codes] = True
    rank = np.cumsum(present, dtype=np.int32) - 1
    return rank[codes], int(present.sum())


def _any_value(x: FloatArray | None) -> bool:
    return x is not None and not bool(np.all(np.isnan(x)))


def _stack(xs: list[FloatArray | None], n: int) -> FloatArray:
    out = np.empty((len(xs), n))
    for i, x in enumerate(xs):
        out[i] = x
    return out


def features(
    snapshot: FleetSnapshot, now: float, max_age: float, min_peers: int
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(n, f) peer-normalised features, rows with peers and complete data, feature names."""
    g = snapshot.gpus
    n = len(g)
    n_models = max(len(g.models), 1)
    # Peers: same model, same job; GPUs without a job by the namespace of the pod holding them
    # (a serving deployment, a team's notebooks), free GPUs apart. Measured: one "no job" group
    # compared free GPUs waiting for a job with busy serving GPUs (held-out seeds 2001/2002: 64
    # and 72 false flags) and a team's idle pods with serving (small-pods-quiet: 8).
    pod = np.asarray(g.pod_index, dtype=np.int64)
    job = g.job_index.astype(np.int64)
    n_jobs = int(job.max(initial=-1)) + 1
    ns_codes: dict[str, int] = {}
    pod_ns = np.array(
        [ns_codes.setdefault(p.namespace, len(ns_codes)) for p in snapshot.pods], dtype=np.int64
    )
    group = np.where(job >= 0, job + 1, 0)
    no_job_held = (job < 0) & (pod >= 0) & (pod < len(pod_ns))
    group[no_job_held] = n_jobs + 1 + pod_ns[pod[no_job_held]]
    readings: list[tuple[str, float, FloatArray | None, bool]] = [
        (name, floor, value(snapshot, name, now, max_age), True)
        for name, floor in zip(FEATURES, FLOOR, strict=True)
    ]
    readings += [(name, floor, value(snapshot, name, now, max_age), False) for name, floor in RATES]
    # Outside jobs, idle GPUs are their own peers: a serving replica without traffic is gpu_idle's
    # business, not an anomaly (measured: the 10k-GPU bench fleet's idle serving GPUs were 431
    # of 433 anomaly findings, z -54 on SM clock against their busy namespace peers).
    util = readings[FEATURES.index(UTIL)][2]
    idle = (job < 0) & (np.nan_to_num(util, nan=np.inf) <= IDLE_UTIL) if util is not None else None
    peer = group * n_models + g.model_index
    if idle is not None:
        peer = peer * 2 + idle
    pid, n_p = _dense_ids(peer)
    names: list[str] = []
    ok = np.ones(n, dtype=bool)
    used = [(name, floor, x, req) for name, floor, x, req in readings if _any_value(x)]
    if not used:
        return np.zeros((n, 0)), np.zeros(n, dtype=bool), names
    z = _stack([r[2] for r in used], n)  # gauges x GPUs, then z-scores in place
    # Every gauge's peer median and MAD at once: the peer groups are the same for all.
    meds, mads = groups_median_mad(z, pid, n_p)
    for (name, floor, x, required), zk, med_g, mad_g in zip(used, z, meds, mads, strict=True):
        assert x is not None
        # The scale per peer group, then read per GPU: the same numbers as per GPU, in a
        # fraction of the work (n_p groups, not 100k rows, through nan_to_num and maximum).
        scale_g = np.maximum(1.4826 * np.nan_to_num(mad_g), floor)
        np.subtract(zk, med_g[pid], out=zk)
        np.divide(zk, scale_g[pid], out=zk)
        if not required:
            np.nan_to_num(zk, copy=False)
        names.append(name)
        if required:
            ok &= ~np.isnan(x)
    counts = np.bincount(pid, minlength=n_p)[pid]
    return z.T, ok & (counts >= min_peers), names


def detect(
    snapshot: FleetSnapshot, state: State | None, now: float, params: Params
) -> tuple[list[Finding], State]:
    g = snapshot.gpus
    interval = scrape_interval(snapshot)
    cur = align(state.gpus if state else None, gpu_keys(snapshot), _SPEC)
    dt = dt_since(state.last_now if state else np.nan, now, interval)
    x, ok, names = features(snapshot, now, params.max_age_intervals * interval, params.min_peers)
    flagged = np.zeros(len(g), dtype=bool)
    scores = np.full(len(g), np.nan)  # NaN: not scored (yet) this cycle
    model = state.model if state else None
    fits = state.fits if state else 0
    population = int(ok.sum())
    scoring = bool(x.shape[1]) and population >= params.max_samples // 4
    if scoring:
        cols = tuple(names)
        if model is None or due(
            model, cols, population, now, params.refit_seconds, params.refit_population_change
        ):
            model, fits = fit(x[ok], cols, now, params), fits + 1
        # A GPU beyond z_limit is flagged whatever its score; the others are scored only as far
        # as it takes to know which side of the threshold they are on (detectors.anomaly_score).
        flagged = ok & (row_abs_max(x, skip_nan=True) >= params.z_limit)
        rows = np.flatnonzero(ok & ~flagged)
        assert model is not None
        flagged[rows], scores[rows] = model.below(x[rows], params.score_threshold)
    acc = np.where(ok, persist(cur["acc"], flagged, dt, params.min_seconds), cur["acc"]).astype(
        np.float32
    )
    active = hysteresis(acc, ~np.isnan(cur["onset"]), params.min_seconds)
    onset = np.where(active, np.fmin(cur["onset"], now - acc.astype(np.float64)), np.nan)
    unscored = active & ok & np.isnan(scores)
    if scoring and model is not None and unscored.any():  # the evidence of what is reported
        scores[unscored] = model.score(x[unscored])
    scores = np.nan_to_num(scores, nan=0.0)
    findings: list[Finding] = []
    for i in np.flatnonzero(active):
        ctx = gpu_context(snapshot, int(i))
        node = node_name(snapshot, int(g.node_index[i]))
        top: list[int] = [int(k) for k in np.argsort(-np.abs(x[i]))[:3]] if x.shape[1] else []
        findings.append(
            Finding(
                kind=FindingKind.ANOMALY,
                severity=Severity.INFO,
                summary=f"GPU {g.device_index[i]} on {node} behaves unlike its peers",
                first_seen=float(onset[i]),
                last_seen=now,
                node=node,
                gpu_uuid=str(g.uuid[i]),
                evidence={
                    **ctx,
                    "score": round(float(scores[i]), 3),
                    "threshold": params.score_threshold,
                    "peer_z": {names[k]: round(float(x[i, k]), 2) for k in top},
                },
                recommended_action="look at the GPU's dashboards; run DCGM diag if it persists",
            )
        )
    return findings, State(cur.replace(acc=acc, onset=onset), now, model, fits)


NEEDS = Needs(
    ((UTIL, GR_ACTIVE, TENSOR_ACTIVE, DRAM_ACTIVE, SM_CLOCK, POWER, GPU_TEMP, MEM_TEMP),),
    (UTIL, GR_ACTIVE, TENSOR_ACTIVE, DRAM_ACTIVE, SM_CLOCK, POWER, GPU_TEMP, MEM_TEMP),
    {},
    {},
)
"""The fields this detector reads, for detectors.coverage: what it needs to run at all,
what full evidence is, and what it infers from when a field is missing."""


SPEC = DetectorSpec(
    needs=NEEDS,
    name="anomaly",
    params_type=Params,
    detect=detect,
    kinds=(FindingKind.ANOMALY,),
    enabled_by_default=True,
    severities=(Severity.INFO,),
    doc="IsolationForest on peer-normalised gauges and NVLink traffic (info).",
)
