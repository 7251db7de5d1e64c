"""A tiny builder of hand-made FleetSnapshots for detector tests: a few arrays in, a snapshot out.

    fleet = Fleet(nodes=4).job("ml/train", nodes=[0, 1, 2, 3])
    fleet.set(UTIL, 0.0, gpu=(1, 3))                 # node 1, device 3
    snap = fleet.snapshot(now=1000.0)

Defaults describe a healthy fleet in steady training (util 98 %, tensor 0.6, ...), sampled 5 s
before `now` with a 30 s scrape interval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from detectors.signals import (
    GPU_TEMP,
    GR_ACTIVE,
    POWER,
    SM_CLOCK,
    TENSOR_ACTIVE,
    THROTTLE,
    UTIL,
    XID,
)
from observer.fleet.model import (
    NO_INDEX,
    FleetSnapshot,
    GpuTable,
    Job,
    JobKey,
    MetricColumn,
    Node,
    NodeName,
    Pod,
    TelemetryHealth,
)

HEALTHY_TRAINING = {
    UTIL: 98.0,
    GR_ACTIVE: 0.92,
    TENSOR_ACTIVE: 0.6,
    POWER: 600.0,
    SM_CLOCK: 1980.0,
    GPU_TEMP: 65.0,
    THROTTLE: 0.0,
    XID: 0.0,
}


@dataclass
class Fleet:
    nodes: int = 2
    gpus_per_node: int = 8
    interval: float = 30.0
    model: str = "NVIDIA H100 80GB HBM3"
    jobs: list[tuple[str, list[int]]] = field(default_factory=list)
    pods: list[tuple[str, int, str | None]] = field(default_factory=list)
    """(pod key, node, job key or None); each pod holds all GPUs of its node."""
    values: dict[str, np.ndarray] = field(default_factory=dict)
    age: np.ndarray | None = None
    increases: dict[str, np.ndarray] = field(default_factory=dict)
    window: float = 60.0
    node_up: np.ndarray | None = None
    source_ok: bool = True
    steps_increase: dict[str, float] = field(default_factory=dict)
    dropped: set[int] = field(default_factory=set)
    allocatable: dict[int, int] = field(default_factory=dict)
    """Node position -> allocatable `nvidia.com/gpu` (capacity: gpus_per_node); other nodes
    carry no counts (not collected)."""
    time_sliced: bool = False
    """Pods on one node share its GPUs (virtual-GPU series): the node's last pod is each GPU's
    `pod_index`, the earlier ones its shared pods. Otherwise the last pod holds them alone."""

    def __post_init__(self) -> None:
        n = self.n
        for name, v in HEALTHY_TRAINING.items():
            self.values.setdefault(name, np.full(n, v))
        if self.age is None:
            self.age = np.full(n, 5.0)

    @property
    def n(self) -> int:
        return self.nodes * self.gpus_per_node

    def pos(self, node: int, device: int) -> int:
        return node * self.gpus_per_node + device

    def job(self, key: str, nodes: Sequence[int]) -> Fleet:
        self.jobs.append((key, list(nodes)))
        for rank, node in enumerate(nodes):
            name = key.split("/")[1]
            self.pods.append((f"{key.split('/')[0]}/{name}-worker-{rank}", node, key))
        return self

    def pod(self, key: str, node: int) -> Fleet:
        self.pods.append((key, node, None))
        return self

    def mask(self, gpu: tuple[int, int] | None = None, node: int | None = None) -> np.ndarray:
        m = np.zeros(self.n, dtype=bool)
        if gpu is not None:
            m[self.pos(*gpu)] = True
        elif node is not None:
            m[node * self.gpus_per_node : (node + 1) * self.gpus_per_node] = True
        else:
            m[:] = True
        return m

    def set(
        self,
        name: str,
        value: float | np.ndarray,
        gpu: tuple[int, int] | None = None,
        node: int | None = None,
    ) -> Fleet:
        col = self.values.setdefault(name, np.full(self.n, np.nan)).copy()
        col[self.mask(gpu, node)] = value if np.isscalar(value) else np.asarray(value)
        self.values[name] = col
        return self

    def set_increase(
        self, name: str, value: float, gpu: tuple[int, int] | None = None, node: int | None = None
    ) -> Fleet:
        col = self.increases.setdefault(name, np.zeros(self.n)).copy()
        col[self.mask(gpu, node)] = value
        self.increases[name] = col
        self.values.setdefault(name, np.full(self.n, 1000.0))
        return self

    def stale(
        self, seconds: float, gpu: tuple[int, int] | None = None, node: int | None = None
    ) -> Fleet:
        assert self.age is not None
        self.age = self.age.copy()
        self.age[self.mask(gpu, node)] = seconds
        return self

    def snapshot(self, now: float) -> FleetSnapshot:
        assert self.age is not None
        keep = np.array([i not in self.dropped for i in range(self.n)], dtype=bool)
        rows = np.flatnonzero(keep)
        nodes = tuple(
            Node(
                NodeName(f"node-{i:03d}"),
                conditions={"Ready": "True"},
                gpu_capacity=self.gpus_per_node if i in self.allocatable else None,
                gpu_allocatable=self.allocatable.get(i),
            )
            for i in range(self.nodes)
        )
        job_keys = [k for k, _ in self.jobs]
        pods: list[Pod] = []
        gpu_pod = np.full(self.n, NO_INDEX, dtype=np.int32)
        gpu_job = np.full(self.n, NO_INDEX, dtype=np.int32)
        rank_of: dict[str, int] = {}
        for idx, (key, node, job) in enumerate(self.pods):
            ns, name = key.split("/", 1)
            j = job_keys.index(job) if job else NO_INDEX
            rank = rank_of.get(job or "", 0)
            rank_of[job or ""] = rank + 1
            pods.append(Pod(ns, name, nodes[node].name, job_index=j, rank=rank if job else -1))
            gpu_pod[self.mask(node=node)] = idx
            gpu_job[self.mask(node=node)] = j
        jobs = tuple(
            Job(
                JobKey(k),
                "training.kubeflow.org/job-name",
                tuple(i for i, p in enumerate(self.pods) if p[2] == k),
            )
            for k in job_keys
        )
        node_idx = np.repeat(np.arange(self.nodes, dtype=np.int32), self.gpus_per_node)
        dev = np.tile(np.arange(self.gpus_per_node, dtype=np.int32), self.nodes)
        uuid = np.array(
            [f"GPU-{i // self.gpus_per_node:03d}-{i % self.gpus_per_node}" for i in range(self.n)],
            dtype=object,
        )
        empty = np.array([""] * self.n, dtype=object)
        gpus = GpuTable(
            uuid=uuid[rows],
            node_index=node_idx[rows],
            device_index=dev[rows],
            model_index=np.zeros(rows.shape[0], dtype=np.int32),
            models=(self.model,),
            pod_index=gpu_pod[rows],
            job_index=gpu_job[rows],
            mig_instance=empty[rows],
            mig_profile=empty[rows],
            pci_bus_id=empty[rows],
        )
        ts = now - self.age
        metrics: dict[str, MetricColumn] = {}
        for name, v in self.values.items():
            inc = self.increases.get(name)
            metrics[name] = MetricColumn(
                value=v[rows].astype(np.float64),
                timestamp=np.where(np.isnan(v), np.nan, ts)[rows],
                increase=None if inc is None else inc[rows],
                window_seconds=self.window if inc is not None else 0.0,
            )
        node_last = np.array(
            [np.nanmax(ts[self.mask(node=i) & keep], initial=-np.inf) for i in range(self.nodes)]
        )
        node_last = np.where(np.isfinite(node_last), node_last, np.nan)
        telemetry = TelemetryHealth(
            node_last_sample=node_last,
            node_up=self.node_up if self.node_up is not None else np.ones(self.nodes, dtype=bool),
            scrape_interval=self.interval,
            source_ok=self.source_ok,
        )
        steps: Mapping[JobKey, float] = {JobKey(k): v for k, v in self.steps_increase.items()}
        return FleetSnapshot(
            taken_at=now,
            nodes=nodes,
            gpus=gpus,
            pods=tuple(pods),
            jobs=jobs,
            metrics=metrics,
            job_steps_increase=steps,
            telemetry=telemetry,
            shared_pods=self._shared(gpu_pod, rows),
        )

    def _shared(self, gpu_pod: np.ndarray, rows: np.ndarray) -> tuple[tuple[int, int], ...]:
        if not self.time_sliced:
            return ()
        at = {int(r): i for i, r in enumerate(rows)}
        return tuple(
            (at[int(g)], idx)
            for idx, (_, node, _) in enumerate(self.pods)
            for g in np.flatnonzero(self.mask(node=node))
            if int(g) in at and gpu_pod[g] != idx
        )
