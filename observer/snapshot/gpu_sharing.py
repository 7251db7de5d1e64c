"""Pods that share a GPU (time-slicing), so that every pod on a GPU is attributed, not one.

With time-slicing and dcgm-exporter's `KUBERNETES_VIRTUAL_GPUS`, a shared GPU has one series per
pod holding it (each with a `vgpu` label), so its identity rows repeat the GPU with different
pods at the same sample time. The builder keeps one row per GPU (its `pod_index`); the others'
pods are the GPU's shared pods. A row of another pod that is older than the GPU's newest is a
previous pod's lingering series (backfilled data has no staleness markers), never a sharer.
"""

from __future__ import annotations

import numpy as np

from observer.snapshot.gpu_rows import NO_HOSTNAME, GpuRows

SharedPod = tuple[int, str, str, str]
"""(GPU position, namespace, pod, node name) of a pod sharing a GPU beyond its `pod_index`."""


def shared_pods(rows: GpuRows) -> list[SharedPod]:
    """Pods that repeat a GPU's identity at its newest time with another pod (module doc);
    empty, at no cost, when no identity row repeats a GPU."""
    src = rows.source
    if rows.duplicate_rows == 0 or src.pod is None:
        return []
    pos = rows.row_to_gpu()
    kept = rows.gpu_rows[pos]  # per identity row: the row its GPU was built from
    stamp = src.timestamp if src.timestamp is not None else np.zeros(len(src))
    ns = src.namespace if src.namespace is not None else np.full(len(src), "", dtype=object)
    same_time = (stamp >= stamp[kept]) | (np.isnan(stamp) & np.isnan(stamp[kept]))
    other = (src.pod != "") & ((src.pod != src.pod[kept]) | (ns != ns[kept]))
    cand = np.flatnonzero((np.arange(len(src)) != kept) & same_time & other)
    if cand.size == 0:
        return []
    _, _, host = rows.pod_labels()
    out: set[SharedPod] = set()
    for i in cand.tolist():
        g = int(pos[i])
        node = str(host[g])
        out.add((g, str(ns[i]), str(src.pod[i]), "" if node == NO_HOSTNAME else node))
    return sorted(out)
