"""Per-GPU columns metering needs from one snapshot: who holds each GPU, how busy, how healthy.

Columnar like the snapshot: numpy arrays indexed by GPU position, codes into small key lists
(namespaces, teams), with Python loops only over pods, nodes and findings, never over GPUs.

A MIG instance is a row of its own and counts as the fraction of its GPU that its profile names
(`3g.40gb`: 3 of 7 compute slices); a whole GPU counts 1.

Health of a GPU, worst first:
- `lost`: a gpu_lost finding names it (fallen off the bus); where it left the snapshot,
  metering.meter keeps its last row;
- `quarantined`: its node carries gpufleet's quarantine label or taint;
- `degraded`: a hardware finding (XID, memory, throttle, interconnect, lost) of severity warning
  or critical names the GPU, or names its node without a GPU;
- `no_data`: no utilization sample (missing telemetry is unknown, never "idle" or "dead"); a MIG
  instance, which has no `GPU_UTIL`, reads its graphics engine activity instead;
- `healthy`: none of the above.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from detectors.findings import Finding, FindingKind, Severity
from observer.fleet.columns import factorize
from observer.fleet.model import (
    NO_INDEX,
    BoolArray,
    FleetSnapshot,
    FloatArray,
    IntArray,
    StrArray,
)
from remediations.types import QUARANTINE_LABEL, QUARANTINE_TAINT

UTIL = "DCGM_FI_DEV_GPU_UTIL"
GR_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
HARDWARE = frozenset(
    {
        FindingKind.GPU_XID,
        FindingKind.GPU_MEMORY,
        FindingKind.GPU_THROTTLE,
        FindingKind.GPU_INTERCONNECT,
        FindingKind.GPU_LOST,
    }
)


class Health(StrEnum):
    HEALTHY = "healthy"
    NO_DATA = "no_data"
    DEGRADED = "degraded"
    QUARANTINED = "quarantined"
    LOST = "lost"
    """Named by a gpu_lost finding (fallen off the bus): worse than its node's quarantine. Where
    it left the snapshot altogether the meter keeps its last row, marked lost."""


HEALTH_CODES = (
    Health.HEALTHY,
    Health.NO_DATA,
    Health.DEGRADED,
    Health.QUARANTINED,
    Health.LOST,
)
"""Health by code, worst last: a GPU's health is the maximum code that applies."""


@dataclass(frozen=True, slots=True)
class GpuColumns:
    allocated: BoolArray
    utilization: FloatArray
    """Percent 0-100, NaN where no sample."""
    namespace: IntArray
    """Code into `namespaces`, NO_INDEX when not allocated."""
    namespaces: list[str]
    team: IntArray
    """Code into `teams`, NO_INDEX when not allocated ("" is the team of unlabelled pods)."""
    teams: list[str]
    pool: IntArray
    """Code into `pools`, per GPU (from its node's pool label; "" when unlabelled)."""
    pools: list[str]
    weight: FloatArray
    """GPUs per row: 1 for a whole GPU, the profile's share of 7 slices for a MIG instance."""
    health: IntArray
    """Code into HEALTH_CODES."""
    issue: list[str]
    """Per GPU, the kind of its worst hardware finding ("" for none); sparse in practice."""
    pod_namespace: IntArray
    """Per pod (FleetSnapshot.pods), its code into `namespaces`: for pods sharing a GPU."""
    pod_team: IntArray
    """Per pod, its code into `teams`."""


def _codes(values: list[str]) -> tuple[list[int], list[str]]:
    index: dict[str, int] = {}
    codes = [index.setdefault(v, len(index)) for v in values]
    return codes, list(index)


def _pod_columns(
    snap: FleetSnapshot, team_label: str
) -> tuple[IntArray, list[str], IntArray, list[str]]:
    ns_codes, namespaces = _codes([p.namespace for p in snap.pods])
    team_codes, teams = _codes([p.labels.get(team_label, "") for p in snap.pods])
    return (
        np.asarray(ns_codes, dtype=np.int32),
        namespaces,
        np.asarray(team_codes, dtype=np.int32),
        teams,
    )


MIG_SLICES = 7.0
"""Compute slices of an A100/H100/H200 in MIG mode; a `Ng.*` profile holds N of them."""


def _mig_weight(profile: StrArray) -> FloatArray:
    n = len(profile)
    if n == 0 or not (profile != "").any():
        return np.ones(n)
    codes, values = factorize(profile)
    per_value = np.array([_profile_share(v) for v in values], dtype=np.float64)
    out: FloatArray = per_value[codes]
    return out


def _profile_share(profile: str) -> float:
    if not profile:
        return 1.0
    head = profile.split(".", 1)[0].removesuffix("g")
    try:
        return min(1.0, int(head) / MIG_SLICES)
    except ValueError:  # an unknown profile name: count the slice as a whole GPU, visibly
        return 1.0


def _quarantined_nodes(snap: FleetSnapshot) -> BoolArray:
    return np.fromiter(
        (
            QUARANTINE_LABEL in n.labels or any(t.key == QUARANTINE_TAINT for t in n.taints)
            for n in snap.nodes
        ),
        dtype=bool,
        count=len(snap.nodes),
    )


def _findings_by_gpu(
    snap: FleetSnapshot, findings: Iterable[Finding]
) -> tuple[BoolArray, list[str]]:
    n = len(snap.gpus)
    degraded = np.zeros(n, dtype=bool)
    issue = [""] * n
    relevant = [
        f for f in findings if f.kind in HARDWARE and f.severity.rank >= Severity.WARNING.rank
    ]
    if not relevant:
        return degraded, issue
    relevant.sort(key=lambda f: f.severity.rank)  # the worst is written last and wins
    by_uuid: dict[str, list[int]] = {}  # a MIG GPU's finding concerns every instance of it
    for i, u in enumerate(snap.gpus.uuid.tolist()):
        by_uuid.setdefault(u, []).append(i)
    node_pos = snap.node_index()
    for f in relevant:
        if f.gpu_uuid is not None:
            rows = by_uuid.get(f.gpu_uuid, [])
        elif f.node is not None and f.node in node_pos:
            rows = np.flatnonzero(snap.gpus.node_index == node_pos[f.node]).tolist()
        else:
            rows = []
        for r in rows:
            degraded[r] = True
            issue[r] = str(f.kind)
    return degraded, issue


def _unanswered_as_unmeasured(snap: FleetSnapshot, util: FloatArray) -> FloatArray:
    """A GPU whose node's exporter failed its last scrape is unmeasured: the page the collector
    keeps for it is old, and reading it as busy or idle would meter time nobody measured."""
    t = snap.telemetry
    if t is None or not snap.nodes or len(t.node_up) != len(snap.nodes) or t.node_up.all():
        return util
    node = snap.gpus.node_index
    answered = np.ones(len(node), dtype=bool)
    known = (node >= 0) & (node < len(t.node_up))
    answered[known] = np.asarray(t.node_up, dtype=bool)[node[known]]
    return np.where(answered, util, np.nan)


def _lost(snap: FleetSnapshot, findings: Iterable[Finding]) -> BoolArray:
    uuids = {f.gpu_uuid for f in findings if f.kind is FindingKind.GPU_LOST and f.gpu_uuid}
    return np.isin(snap.gpus.uuid, sorted(uuids)) if uuids else np.zeros(len(snap.gpus), bool)


def gpu_columns(
    snap: FleetSnapshot,
    findings: Iterable[Finding] = (),
    team_label: str = "team",
    pool_label: str = "gpufleet.io/pool",
) -> GpuColumns:
    gpus = snap.gpus
    n = len(gpus)
    pod = gpus.pod_index
    has_pod = pod != NO_INDEX
    allocated = has_pod.copy()
    if snap.shared_pods:  # a time-sliced GPU is held while any of its pods holds it
        allocated[[g for g, _ in snap.shared_pods]] = True
    util_col = snap.metrics.get(UTIL)
    util = (
        np.asarray(util_col.value, dtype=np.float64) if util_col is not None else np.full(n, np.nan)
    )
    gr_col = snap.metrics.get(GR_ACTIVE)
    if gr_col is not None and (gpus.mig_instance != "").any():
        # GPU_UTIL is not supported on MIG instances (dcgm-exporter #430): their graphics
        # engine activity is the instance's own utilisation.
        mig_gr = (gpus.mig_instance != "") & np.isnan(util)
        util = np.where(mig_gr, 100.0 * np.asarray(gr_col.value, dtype=np.float64), util)
    util = _unanswered_as_unmeasured(snap, util)
    ns_of_pod, namespaces, team_of_pod, teams = _pod_columns(snap, team_label)
    safe_pod = np.where(has_pod, pod, 0)
    if snap.pods:
        namespace = np.where(has_pod, ns_of_pod[safe_pod], NO_INDEX).astype(np.int32)
        team = np.where(has_pod, team_of_pod[safe_pod], NO_INDEX).astype(np.int32)
    else:
        namespace = np.full(n, NO_INDEX, dtype=np.int32)
        team = np.full(n, NO_INDEX, dtype=np.int32)
    pool_codes, pools = _codes([n.labels.get(pool_label, "") for n in snap.nodes])
    pool = (
        np.asarray(pool_codes, dtype=np.int32)[gpus.node_index]
        if snap.nodes
        else np.full(n, NO_INDEX, dtype=np.int32)
    )
    weight = _mig_weight(gpus.mig_profile)
    findings = list(findings)
    degraded, issue = _findings_by_gpu(snap, findings)
    health = np.where(np.isnan(util), 1, 0).astype(np.int32)
    health[degraded] = 2
    if snap.nodes:
        health[_quarantined_nodes(snap)[gpus.node_index]] = 3
    health[_lost(snap, findings)] = 4
    return GpuColumns(
        allocated, util, namespace, namespaces, team, teams, pool, pools, weight, health, issue,
        ns_of_pod, team_of_pod,
    )  # fmt: skip
