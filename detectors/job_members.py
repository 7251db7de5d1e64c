"""A snapshot seen job by job: a time-sliced GPU counts as a member of every job holding it.

The GPU table names one pod (and job) per GPU; the other pods sharing a GPU are in
`FleetSnapshot.shared_pods`. Job-level detectors (nccl_hang, straggler) compare a job's GPUs, so
a job whose GPUs are all shared with another job's pod would never be watched. `by_job_member`
repeats such a GPU's row, with its readings, once per further job holding it; the repeats come
after the GPU rows, so row positions below `len(snapshot.gpus)` keep their meaning.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from detectors.state import gpu_keys
from observer.fleet.model import NO_INDEX, FleetSnapshot, IntArray, MetricColumn, StrArray


def extra_members(snapshot: FleetSnapshot) -> tuple[IntArray, IntArray, IntArray]:
    """(GPU position, pod, job) of each job holding a GPU besides the GPU's own job, each
    (GPU, job) once; empty, at no cost, when no GPU is shared."""
    g = snapshot.gpus
    seen: set[tuple[int, int]] = set()
    out: list[tuple[int, int, int]] = []
    for gpu, pod in snapshot.shared_pods:
        job = snapshot.pods[pod].job_index
        if job == NO_INDEX or job == int(g.job_index[gpu]) or (gpu, job) in seen:
            continue
        seen.add((gpu, job))
        out.append((gpu, pod, job))
    cols = np.array(out, dtype=np.int32).reshape(-1, 3)
    return cols[:, 0], cols[:, 1], cols[:, 2]


def _take(col: MetricColumn, rows: IntArray) -> MetricColumn:
    return dataclasses.replace(
        col,
        value=col.value[rows],
        timestamp=col.timestamp[rows],
        increase=None if col.increase is None else col.increase[rows],
        span=None if col.span is None else col.span[rows],
    )


def by_job_member(snapshot: FleetSnapshot) -> FleetSnapshot:
    """The snapshot with a shared GPU's row repeated for each further job holding it (module
    doc); the snapshot itself when no GPU is shared between jobs."""
    gpu, pod, job = extra_members(snapshot)
    if gpu.size == 0:
        return snapshot
    g = snapshot.gpus
    rows = np.concatenate([np.arange(len(g), dtype=np.int32), gpu])

    def grow(a: np.ndarray, extra: np.ndarray) -> np.ndarray:
        return np.concatenate([a, extra.astype(a.dtype)])

    gpus = dataclasses.replace(
        g,
        uuid=g.uuid[rows],
        node_index=g.node_index[rows],
        device_index=g.device_index[rows],
        model_index=g.model_index[rows],
        pod_index=grow(g.pod_index, pod),
        job_index=grow(g.job_index, job),
        mig_instance=g.mig_instance[rows],
        mig_profile=g.mig_profile[rows],
        pci_bus_id=g.pci_bus_id[rows],
    )
    metrics = {name: _take(col, rows) for name, col in snapshot.metrics.items()}
    return dataclasses.replace(snapshot, gpus=gpus, metrics=metrics, shared_pods=())


def member_keys(view: FleetSnapshot, snapshot: FleetSnapshot) -> StrArray:
    """Stable per-row identity of `by_job_member`'s view: a GPU's key, and for a repeat the key
    with its job's (so per-GPU state of one job never passes to another)."""
    keys = gpu_keys(view)
    n = len(snapshot.gpus)
    if len(view.gpus) == n:
        return keys
    keys = keys.copy()
    jobs = view.gpus.job_index
    for i in range(n, len(view.gpus)):  # the repeats only: few
        keys[i] = f"{keys[i]}@{view.jobs[int(jobs[i])].key}"
    return keys
