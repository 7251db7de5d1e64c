"""The straggler's readings: each job's "doing math" signal, node groups within jobs, and the
evidence threshold scaled by how noisy a GPU's gap is (detectors/straggler.py judges with them).

Kept apart so the detector module reads as the judgement: gap -> evidence -> finding.
"""

from __future__ import annotations

import numpy as np

from detectors.identity_memo import read_only
from detectors.signals import GR_ACTIVE, TENSOR_ACTIVE, group_median, value
from detectors.state import KeyedArrays
from observer.fleet.model import NO_INDEX, FleetSnapshot, IntArray

JUMP_SD = 2.0 / np.sqrt(np.pi)
"""E|a - b| for two independent readings of sd 1 (sqrt(2) * sqrt(2/pi))."""


_last_ids: tuple[np.ndarray, tuple[IntArray, int]] | None = None
"""The latest `group_ids` answer with the (job, node) codes it came from: the same job on the
same nodes with the same GPUs reporting, cycle after cycle (a sort of the fleet saved)."""


def group_ids(job: IntArray, node: IntArray, valid: np.ndarray) -> tuple[IntArray, int]:
    """One id per (job, node) among valid rows: a job's GPUs on one node (node-mates).
    Read-only: it may be handed out again for the same codes."""
    global _last_ids
    combo = job.astype(np.int64) * (int(node.max(initial=0)) + 1) + node.astype(np.int64)
    combo = np.where(valid, combo, -1)
    last = _last_ids
    if last is not None and last[0].shape == combo.shape and np.array_equal(last[0], combo):
        return last[1]
    uniq, inv = np.unique(combo, return_inverse=True)
    offset = 1 if uniq.shape[0] and uniq[0] == -1 else 0
    gid = (inv.astype(np.int32) - offset).astype(np.int32)
    out = (read_only(np.where(valid, gid, NO_INDEX).astype(np.int32)), int(uniq.shape[0] - offset))
    _last_ids = (combo, out)  # combo is this call's own array, never handed out
    return out


def job_signal(
    snapshot: FleetSnapshot,
    now: float,
    age: float,
    util: np.ndarray | None,
    jsafe: IntArray,
    n_jobs: int,
    tensor_floor: float,
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
    uses = np.nan_to_num(tmed, nan=0.0) >= tensor_floor
    signal = ["tensor" if u else ("graphics" if fallback is gr else "util") for u in uses]
    if fallback is None:
        return np.where(uses[jsafe], tensor, np.nan), signal
    return np.where(in_job & uses[jsafe], tensor, fallback), signal


def noise_threshold(
    cur: KeyedArrays,
    gap_job: np.ndarray,
    x: np.ndarray,
    busy: np.ndarray,
    judged: np.ndarray,
    jid: IntArray,
    jsafe: IntArray,
    n_jobs: int,
    dt: float,
    interval: float,
    h0: float,
    noise: tuple[float, float, float],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per GPU, h scaled by the scrape noise power above the design one (Params.noise_sd), from
    two estimates, each an EWMA over `noise_seconds`: the job's spread across ranks per scrape
    (1.48 MAD of the gaps; their median is 0), and the GPU's own scrape-to-scrape variance (half
    the mean squared successive difference of its evidence: blind to a step such as a
    straggler's onset, high for a rank that is the busiest only now and then). `noise` is
    (design sd at 30 s scrapes, seconds of the spread's EWMA, seconds of the jumps' EWMA)."""
    noise_sd, noise_seconds, jump_seconds = noise
    spread = 1.4826 * group_median(np.abs(gap_job), np.where(busy, jid, NO_INDEX), n_jobs)
    a = float(1.0 - np.exp(-dt / noise_seconds))

    def ewma(prev: np.ndarray, now_: np.ndarray) -> np.ndarray:
        upd = judged & ~np.isnan(now_)
        out: np.ndarray = np.where(
            np.isnan(prev), np.where(upd, now_, prev), np.where(upd, prev + a * (now_ - prev), prev)
        )
        return out

    sd = ewma(cur["sd"].astype(np.float64), np.where(judged, spread[jsafe], np.nan))
    b = float(1.0 - np.exp(-dt / jump_seconds))
    prev = cur["msd"].astype(np.float64)
    jump = np.abs(x - cur["last"]) / JUMP_SD  # |successive difference| -> sd of one reading
    upd = judged & ~np.isnan(jump)
    msd = np.where(upd, np.where(np.isnan(prev), jump, prev + b * (jump - prev)), prev)
    last = np.where(judged, x, cur["last"])
    var = np.fmax(sd, msd) ** 2
    power = np.where(np.isnan(var), noise_sd**2, var) * interval
    h = h0 * np.maximum(1.0, power / (noise_sd**2 * 30.0))
    return h, sd, msd, last
