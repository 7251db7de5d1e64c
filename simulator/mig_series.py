"""MIG GPUs as dcgm-exporter writes them in flex mode (shared by the live pages and the backfill).

In flex mode (the default) a GPU partitioned with MIG has no device-level series: each GPU
instance has its own, with `GPU_I_PROFILE` and `GPU_I_ID` after `modelName`, the device fields
(temperature, power, XIDs, ECC) repeated on every instance, and no `DCGM_FI_DEV_GPU_UTIL` (not
supported on MIG). Re-partitioning destroys an instance and creates another with a new id; the
GPU's other instances keep reporting throughout.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from observer.fleet.model import BoolArray, IntArray
from simulator.layout import Layout
from simulator.scenario import Scenario

UNSUPPORTED_ON_MIG = frozenset({"DCGM_FI_DEV_GPU_UTIL"})

Instances = dict[int, tuple[str, list[int]]]
"""GPU position -> (profile, GPU instance ids) of the MIG GPUs."""


def instances_at(sc: Scenario, layout: Layout, t: float) -> Instances:
    """The MIG GPUs' instances at `t`: ids 1..n, the last one replaced by a new id at each
    re-partitioning of that GPU so far (MigRepartition)."""
    pools = {p.name: p.mig for p in sc.pools if p.mig is not None}
    if not pools:
        return {}
    done: dict[tuple[str, int], int] = {}
    for r in sc.mig_repartitions:
        if sc.start + r.at <= t:
            done[(r.node, r.gpu)] = done.get((r.node, r.gpu), 0) + 1
    out: Instances = {}
    for g in range(int(layout.gpu_uuid.shape[0])):
        node = layout.nodes[int(layout.gpu_node[g])]
        mig = pools.get(node.pool)
        if mig is None:
            continue
        k = done.get((node.name, int(layout.gpu_device[g])), 0)
        out[g] = (mig.profile, [*range(1, mig.instances), mig.instances + k])
    return out


def expand(
    labels: Sequence[str], gpus: Sequence[int], instances: Instances
) -> tuple[list[str], IntArray, BoolArray]:
    """(label sets, row of `labels` each comes from, whether it is a MIG instance's): a MIG
    GPU's row (`labels[i]` is GPU position `gpus[i]`) once per instance, whole GPUs once."""
    out: list[str] = []
    rows: list[int] = []
    mig: list[bool] = []
    for i, g in enumerate(gpus):
        inst = instances.get(int(g))
        if inst is None:
            out.append(labels[i])
            rows.append(i)
            mig.append(False)
            continue
        profile, ids = inst
        for gi in ids:
            tag = f',GPU_I_PROFILE="{profile}",GPU_I_ID="{gi}",Hostname='
            out.append(labels[i].replace(",Hostname=", tag, 1))
            rows.append(i)
            mig.append(True)
    return out, np.asarray(rows, dtype=np.int32), np.asarray(mig, dtype=bool)
