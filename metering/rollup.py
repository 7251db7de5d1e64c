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

Idle = allocated - busy - unmeasured. A MIG instance counts as its share of a GPU. Sums use
`np.bincount` over (key code x model) codes: no Python loop over GPUs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from metering.config import BUCKET_SECONDS
from metering.gpu_columns import GpuColumns
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


def _sum(
    codes: IntArray, keys: list[str], snap: FleetSnapshot, cols: GpuColumns, all_gpus: bool
) -> Sums:
    models = snap.gpus.models
    m = max(1, len(models))
    ok = codes != NO_INDEX
    combined = codes[ok].astype(np.int64) * m + snap.gpus.model_index[ok]
    size = max(1, len(keys)) * m
    weight = cols.weight[ok]
    alloc = cols.allocated[ok] * weight
    util = cols.utilization[ok]
    measured = ~np.isnan(util)
    busy = np.where(measured, util, 0.0) / 100.0 * alloc
    unmeasured = np.where((alloc > 0) & ~measured, weight, 0.0)
    allocated: FloatArray = np.bincount(combined, weights=alloc, minlength=size).astype(np.float64)
    busy_sum: FloatArray = np.bincount(combined, weights=busy, minlength=size).astype(np.float64)
    unm: FloatArray = np.bincount(combined, weights=unmeasured, minlength=size).astype(np.float64)
    gpu_sum: FloatArray = (
        np.bincount(combined, weights=weight, minlength=size).astype(np.float64)
        if all_gpus
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


def dimension_sums(snap: FleetSnapshot, cols: GpuColumns) -> dict[str, Sums]:
    gpus = snap.gpus
    n = len(gpus)
    job_keys = [str(j.key) for j in snap.jobs] + [NO_JOB]
    job = np.where(gpus.job_index == NO_INDEX, len(snap.jobs), gpus.job_index).astype(np.int32)
    job = np.where(cols.allocated, job, NO_INDEX).astype(np.int32)
    return {
        "fleet": _sum(np.zeros(n, dtype=np.int32), [""], snap, cols, True),
        "node": _sum(gpus.node_index, [str(x.name) for x in snap.nodes], snap, cols, True),
        "pool": _sum(cols.pool, cols.pools, snap, cols, True),
        "namespace": _sum(cols.namespace, cols.namespaces, snap, cols, False),
        "job": _sum(job, job_keys, snap, cols, False),
        "team": _sum(cols.team, cols.teams, snap, cols, False),
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
