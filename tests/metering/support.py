"""Hand-made snapshots for the metering tests: a small fleet with namespaces, teams and jobs."""

from __future__ import annotations

import dataclasses

import numpy as np

from observer.fleet.model import FleetSnapshot, Taint, frozen_map
from remediations.types import QUARANTINE_TAINT
from tests.fleet import Fleet

UTIL = "DCGM_FI_DEV_GPU_UTIL"
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z, on a 5-minute boundary
H100 = "NVIDIA H100 80GB HBM3"


def fleet() -> Fleet:
    """3 nodes x 4 GPUs: node 0 runs job ml/train (util 50 %), node 1 a pod of `web` (util
    100 %), node 2 is free."""
    f = Fleet(nodes=3, gpus_per_node=4).job("ml/train", nodes=[0]).pod("web/api-0", 1)
    f.set(UTIL, 50.0, node=0).set(UTIL, 100.0, node=1).set(UTIL, 0.0, node=2)
    return f


def snapshot(f: Fleet, at: float, teams: dict[str, str] | None = None) -> FleetSnapshot:
    """`teams`: pod namespace -> value of the pod label `team`."""
    snap = f.snapshot(at)
    teams = teams if teams is not None else {"ml": "research", "web": "product"}
    pods = tuple(
        dataclasses.replace(p, labels=frozen_map({"team": teams[p.namespace]}))
        if p.namespace in teams
        else p
        for p in snap.pods
    )
    return dataclasses.replace(snap, pods=pods)


def quarantine(snap: FleetSnapshot, node: int) -> FleetSnapshot:
    nodes = list(snap.nodes)
    nodes[node] = dataclasses.replace(
        nodes[node], taints=(Taint(QUARANTINE_TAINT, "gpu_xid", "NoSchedule"),)
    )
    return dataclasses.replace(snap, nodes=tuple(nodes))


def without_util(snap: FleetSnapshot, gpu: int) -> FleetSnapshot:
    col = snap.metrics[UTIL]
    value = col.value.copy()
    value[gpu] = np.nan
    metrics = dict(snap.metrics)
    metrics[UTIL] = dataclasses.replace(col, value=value)
    return dataclasses.replace(snap, metrics=metrics)


def with_pools(snap: FleetSnapshot, pools: list[str]) -> FleetSnapshot:
    """Label node i with `gpufleet.io/pool: pools[i]` ("" leaves it unlabelled)."""
    nodes = tuple(
        dataclasses.replace(n, labels=frozen_map({"gpufleet.io/pool": p})) if p else n
        for n, p in zip(snap.nodes, pools, strict=True)
    )
    return dataclasses.replace(snap, nodes=nodes)


def as_mig(snap: FleetSnapshot, rows: list[int], instance: str, profile: str) -> FleetSnapshot:
    """Mark GPU rows as MIG instances (same UUID as their GPU would carry, distinct instance)."""
    gpus = snap.gpus
    mig = gpus.mig_instance.copy()
    prof = gpus.mig_profile.copy()
    mig[rows] = instance
    prof[rows] = profile
    return dataclasses.replace(
        snap, gpus=dataclasses.replace(gpus, mig_instance=mig, mig_profile=prof)
    )
