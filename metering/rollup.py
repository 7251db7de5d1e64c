"""One cycle's GPU-seconds, summed per dimension key and GPU model, split over 5-minute buckets.

A cycle at `t` that follows the previous one at `t - dt` accounts the interval (t - dt, t] with
the state it sees at `t` (held backwards, as Prometheus' `sum_over_time` of a subquery counts
each step's sample for the step before it). The interval is cut at bucket boundaries, so a
bucket holds exactly the seconds that fell into it. Per GPU and second:

- `gpu_seconds`: the GPU exists (fleet, node and pool dimensions count every GPU; namespace, job
  and team only allocated ones);
- `allocated_seconds`: a pod holds the GPU;
- `busy_seconds`: allocated x utilization / 100 (utilization-weighted busy time);
- `unmeasured_seconds`: allocated, but no utilization sample: neither busy nor idle.

Idle = allocated - busy - unmeasured. A MIG instance counts as its share of a GPU; a time-sliced
GPU's seconds are split evenly among the pods sharing it, each share going to that pod's
namespace, job and team (the fleet, node and pool count the GPU once). Sums use
`np.bincount` over (key code x model) codes: no Python loop over GPUs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from metering.gpu_columns import GpuColumns
from metering.metering_config import BUCKET_SECONDS
from observer.fleet.model import NO_INDEX, FleetSnapshot, FloatArray, IntArray

DIMENSIONS = ("fleet", "node", "pool", "namespace", "job", "team")
NO_JOB = ""
"""The job key of allocated GPUs whose pod belongs to no recognised job."""


@dataclass(frozen=True, slots=True)
class Sums:
    """Per (key, model): seconds per second of wall time (i.e. GPU counts) for one dimension."""

    keys: list[str]
    models: tuple[str, ...]
    key_code: IntArray
    model_code: IntArray
    gpus: FloatArray
    allocated: FloatArray
    busy: FloatArray
    unmeasured: FloatArray


@dataclass(frozen=True, slots=True)
class Holdings:
    """Who holds each allocated GPU row, with what share: a time-sliced GPU's seconds are split
    evenly among the pods sharing it (FleetSnapshot.shared_pods), a GPU of one pod goes whole."""

    row: IntArray
    """GPU position of each holding."""
    pod: IntArray
    """Pod position of each holding, NO_INDEX for a GPU held by no known pod."""
    share: FloatArray


def holdings(snap: FleetSnapshot, cols: GpuColumns) -> Holdings:
    own = np.flatnonzero(cols.allocated & (snap.gpus.pod_index != NO_INDEX)).astype(np.int32)
    pod = snap.gpus.pod_index[own].astype(np.int32)
    if snap.shared_pods:
        extra = np.array(snap.shared_pods, dtype=np.int32).reshape(-1, 2)
        own = np.concatenate([own, extra[:, 0]])
        pod = np.concatenate([pod, extra[:, 1]])
    per_gpu = np.bincount(own, minlength=len(snap.gpus))
    share: FloatArray = 1.0 / np.maximum(per_gpu[own], 1)
    return Holdings(own, pod, share)


def _sum(
    codes: IntArray,
    keys: list[str],
    snap: FleetSnapshot,
    cols: GpuColumns,
    rows: IntArray | None = None,
    share: FloatArray | None = None,
) -> Sums:
    """Per (key, model) sums over GPU rows (`rows` None: every GPU, `gpu_seconds` counting each)
    or over holdings (`rows`, `share`: `gpu_seconds` counting the held share only)."""
    models = snap.gpus.models
    m = max(1, len(models))
    at = np.arange(len(snap.gpus)) if rows is None else rows
    ok = codes != NO_INDEX
    at = at[ok]
    combined = codes[ok].astype(np.int64) * m + snap.gpus.model_index[at]
    size = max(1, len(keys)) * m
    weight = cols.weight[at] * (1.0 if share is None else share[ok])
    alloc = cols.allocated[at] * weight
    util = cols.utilization[at]
    measured = ~np.isnan(util)
    busy = np.where(measured, util, 0.0) / 100.0 * alloc
    unmeasured = np.where((alloc > 0) & ~measured, weight, 0.0)
    allocated: FloatArray = np.bincount(combined, weights=alloc, minlength=size).astype(np.float64)
    busy_sum: FloatArray = np.bincount(combined, weights=busy, minlength=size).astype(np.float64)
    unm: FloatArray = np.bincount(combined, weights=unmeasured, minlength=size).astype(np.float64)
    gpu_sum: FloatArray = (
        np.bincount(combined, weights=weight, minlength=size).astype(np.float64)
        if rows is None
        else allocated
    )
    keep = np.flatnonzero(gpu_sum > 0)
    return Sums(
        keys,
        models,
        (keep // m).astype(np.int32),
        (keep % m).astype(np.int32),
        gpu_sum[keep],
        allocated[keep],
        busy_sum[keep],
        unm[keep],
    )


def _of_pods(per_pod: IntArray, pods: IntArray, missing: int = NO_INDEX) -> IntArray:
    """Per holding, the code of its pod (`missing` for a holding without a known pod)."""
    if len(per_pod) == 0:
        return np.full(len(pods), missing, dtype=np.int32)
    safe = np.where(pods == NO_INDEX, 0, pods)
    return np.where(pods == NO_INDEX, missing, per_pod[safe]).astype(np.int32)


def dimension_sums(snap: FleetSnapshot, cols: GpuColumns) -> dict[str, Sums]:
    """Fleet, node and pool count every GPU; namespace, job and team count each pod's holding."""
    gpus = snap.gpus
    n = len(gpus)
    held = holdings(snap, cols)
    job_keys = [str(j.key) for j in snap.jobs] + [NO_JOB]
    no_job = len(snap.jobs)
    job_of_pod = np.array(
        [no_job if p.job_index == NO_INDEX else p.job_index for p in snap.pods], dtype=np.int32
    )
    rows, share = held.row, held.share
    return {
        "fleet": _sum(np.zeros(n, dtype=np.int32), [""], snap, cols),
        "node": _sum(gpus.node_index, [str(x.name) for x in snap.nodes], snap, cols),
        "pool": _sum(cols.pool, cols.pools, snap, cols),
        "namespace": _sum(
            _of_pods(cols.pod_namespace, held.pod), cols.namespaces, snap, cols, rows, share
        ),
        "job": _sum(_of_pods(job_of_pod, held.pod, no_job), job_keys, snap, cols, rows, share),
        "team": _sum(_of_pods(cols.pod_team, held.pod), cols.teams, snap, cols, rows, share),
    }


def bucket_overlaps(
    start: float, end: float, size: int = BUCKET_SECONDS
) -> list[tuple[int, float]]:
    """(bucket start, seconds of (start, end] inside it) for buckets of `size` seconds, zero
    overlaps left out."""
    if end <= start:
        return []
    out: list[tuple[int, float]] = []
    b = math.floor(start / size) * size
    while b < end:
        overlap = min(end, b + size) - max(start, b)
        if overlap > 0:
            out.append((int(b), float(overlap)))
        b += size
    return out


def usage_rows(
    cluster: str, sums: dict[str, Sums], overlaps: list[tuple[int, float]]
) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for dim, s in sums.items():
        keys = [s.keys[k] for k in s.key_code.tolist()]
        models = [s.models[m] if s.models else "" for m in s.model_code.tolist()]
        for bucket, secs in overlaps:
            g = (s.gpus * secs).tolist()
            a = (s.allocated * secs).tolist()
            b = (s.busy * secs).tolist()
            u = (s.unmeasured * secs).tolist()
            rows.extend(
                {
                    "cluster": cluster,
                    "dimension": dim,
                    "bucket": bucket,
                    "key": keys[i],
                    "model": models[i],
                    "gpu_seconds": g[i],
                    "allocated_seconds": a[i],
                    "busy_seconds": b[i],
                    "unmeasured_seconds": u[i],
                }
                for i in range(len(keys))
            )
    return rows
