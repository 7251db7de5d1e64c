"""Time-sliced GPUs as dcgm-exporter writes them with `KUBERNETES_VIRTUAL_GPUS` on (shared by
the live pages and the OpenMetrics backfill).

With time-slicing the device plugin hands each pod a replica of a GPU (`<UUID>::<n>`). Without
virtual GPUs the exporter's device-to-pod map keeps one pod per device, so the other pods on it
never appear (the engine's `gpu_pod`). With them, every allocated GPU has one series per pod
holding it, with `vgpu` (the replica) after the pod labels and the device's values repeated, so
an XID count is written once per pod sharing the GPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from observer.fleet.model import IntArray
from simulator.layout import Layout, SimPod
from simulator.series import pod_label_part


def holders(
    layout: Layout, pods: Sequence[SimPod], t: float, node: str | None = None
) -> dict[int, list[int]]:
    """GPU position -> indices (into `pods`) of the pods active at `t` that hold it (on `node`
    only, when given: one exporter's page)."""
    node_pos = {n.name: i for i, n in enumerate(layout.nodes)}
    first_gpu = np.searchsorted(layout.gpu_node, np.arange(len(layout.nodes)))
    out: dict[int, list[int]] = {}
    for k, p in enumerate(pods):
        if node is not None and p.node != node:
            continue
        if not p.start <= t < (math.inf if p.end is None else p.end):
            continue
        base = int(first_gpu[node_pos[p.node]])
        for d in p.gpu_indices:
            out.setdefault(base + d, []).append(k)
    return out


def expand(
    labels: Sequence[str],
    gpus: Sequence[int],
    gpu_pod: IntArray,
    pods: Sequence[SimPod],
    held: dict[int, list[int]],
    pod_labels: str,
) -> tuple[list[str], IntArray]:
    """(label sets, row of `labels` each comes from): an allocated GPU's row once per pod
    holding it, with that pod's labels and `vgpu`; `labels[i]` (GPU position `gpus[i]`) ends
    with the labels of its `gpu_pod`. Unallocated GPUs keep their one row."""
    out: list[str] = []
    rows: list[int] = []
    for i, g in enumerate(gpus):
        own = int(gpu_pod[g])
        if own < 0 or pod_labels == "none":
            out.append(labels[i])
            rows.append(i)
            continue
        base = labels[i][: len(labels[i]) - len(pod_label_part(pods[own], pod_labels))]
        for replica, k in enumerate(held.get(g, [own])):
            out.append(f'{base}{pod_label_part(pods[k], pod_labels)},vgpu="{replica}"')
            rows.append(i)
    return out, np.asarray(rows, dtype=np.int32)
