"""Resolving what a scenario's faults and confounders point at: GPU positions, nodes and jobs.

The engine, the ground truth and the Kubernetes simulator must agree on which GPU a
`{kind: straggler, job: ml/x, rank: 2}` hits, so the choice is made once, here, from the layout.
A target that does not exist is the scenario author's mistake: ConfigError with the field path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from errors import ConfigError
from simulator.layout import Layout, SimPod
from simulator.scenario import FaultKind, Scenario

FOREVER = math.inf


@dataclass(frozen=True, slots=True)
class ResolvedFault:
    index: int
    """Position in `scenario.faults`."""
    kind: FaultKind
    gpu: int
    """GPU position in the layout, or -1 for a job-level fault (nccl_hang)."""
    node: str | None
    device: int | None
    job: str | None
    """`namespace/name` of the job on the target at the fault start (layout placement)."""
    start: float
    end: float
    """Absolute unix seconds; `inf` when the scenario leaves the fault open."""
    severity: float

    def active(self, t: float) -> bool:
        return self.start <= t < self.end


@dataclass(frozen=True, slots=True)
class ResolvedConfounder:
    index: int
    kind: str
    node: str | None
    node_position: int
    job: str | None
    start: float
    end: float
    gpus: tuple[int, ...] = ()
    """GPU positions it touches (app_xid: one; power_cap: the job's or the node's)."""
    xid: int = 0
    cap: float = 1.0


def _source(sc: Scenario) -> str:
    return f"scenario {sc.name!r}"


def _job_pod(sc: Scenario, layout: Layout, where: str, job: str, rank: int) -> SimPod:
    pods = [p for p in layout.pods if p.workload == job]
    if not pods:
        raise ConfigError(
            _source(sc), [f"{where}.job: expected a workload that fits the fleet ({job} did not)"]
        )
    for p in pods:
        if p.rank == rank:
            return p
    raise ConfigError(
        _source(sc), [f"{where}.rank: expected a rank below {len(pods)} (got {rank})"]
    )


def _job_at(layout: Layout, node: str, device: int, t: float) -> str | None:
    for p in layout.pods:
        if p.node == node and device in p.gpu_indices and p.start <= t < (p.end or FOREVER):
            return p.workload
    return None


def resolve_faults(sc: Scenario, layout: Layout) -> tuple[ResolvedFault, ...]:
    nodes = {n.name: n for n in layout.nodes}
    out: list[ResolvedFault] = []
    for i, f in enumerate(sc.faults):
        where = f"faults[{i}]"
        start = sc.start + f.start
        end = FOREVER if f.end is None else sc.start + f.end
        if f.kind == FaultKind.NCCL_HANG:
            assert f.job is not None  # the scenario model enforces it
            _job_pod(sc, layout, where, f.job, 0)
            out.append(ResolvedFault(i, f.kind, -1, None, None, f.job, start, end, f.severity))
            continue
        if f.job is not None and f.node is None:
            pod = _job_pod(sc, layout, where, f.job, f.rank or 0)
            pick = f.gpu if f.gpu is not None else 0
            if pick >= len(pod.gpu_indices):
                raise ConfigError(
                    _source(sc),
                    [f"{where}.gpu: expected below {len(pod.gpu_indices)} GPUs of the pod"],
                )
            node, device = pod.node, pod.gpu_indices[pick]
        else:
            assert f.node is not None and f.gpu is not None
            node, device = f.node, f.gpu
        if node not in nodes:
            raise ConfigError(
                _source(sc), [f"{where}.node: expected a node of the fleet (got {node!r})"]
            )
        if device >= nodes[node].gpus:
            raise ConfigError(
                _source(sc),
                [f"{where}.gpu: expected below {nodes[node].gpus} on {node} (got {device})"],
            )
        gpu = layout.gpu_position(node, device)
        job = f.job if f.job is not None else _job_at(layout, node, device, start)
        out.append(ResolvedFault(i, f.kind, gpu, node, device, job, start, end, f.severity))
    return tuple(out)


def resolve_confounders(sc: Scenario, layout: Layout) -> tuple[ResolvedConfounder, ...]:
    positions = layout.node_position()
    out: list[ResolvedConfounder] = []
    for i, c in enumerate(sc.confounders):
        pos = -1
        if c.node is not None:
            if c.node not in positions:
                raise ConfigError(
                    _source(sc),
                    [f"confounders[{i}].node: expected a node of the fleet (got {c.node!r})"],
                )
            pos = positions[c.node]
        start, end = sc.start + c.start, sc.start + c.end
        gpus: tuple[int, ...] = ()
        node = c.node
        where = f"confounders[{i}]"
        if c.kind in ("app_xid", "gpu_gap"):
            if c.job is not None and c.node is None:
                pod = _job_pod(sc, layout, where, c.job, c.rank or 0)
                node, pos = pod.node, positions[pod.node]
                gpus = (layout.gpu_position(pod.node, pod.gpu_indices[0]),)
            else:
                assert c.node is not None and c.gpu is not None
                gpus = (layout.gpu_position(c.node, c.gpu),)
        elif c.kind == "power_cap":
            if c.job is not None:
                _job_pod(sc, layout, where, c.job, 0)
                gpus = tuple(
                    layout.gpu_position(p.node, d)
                    for p in layout.pods
                    if p.workload == c.job
                    for d in p.gpu_indices
                )
            elif c.node is not None:
                gpus = tuple(layout.gpu_position(c.node, d) for d in range(layout.nodes[pos].gpus))
        out.append(ResolvedConfounder(i, c.kind, node, pos, c.job, start, end, gpus, c.xid, c.cap))
    return tuple(out)
