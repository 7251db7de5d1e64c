"""Where everything sits in a simulated fleet: nodes, GPUs and the initial pod placement.

Deterministic for a scenario: the same file always yields the same names, UUIDs and placement,
so that the metric generator, the Kubernetes API and the ground truth agree without talking.
"""

from __future__ import annotations

import uuid as uuidlib
from dataclasses import dataclass, field

import numpy as np

from observer.fleet.model import IntArray, StrArray
from simulator.scenario import Scenario, Workload, WorkloadKind

GPU_PRODUCT = {
    "A100": "NVIDIA-A100-SXM4-80GB",
    "H100": "NVIDIA-H100-80GB-HBM3",
    "H200": "NVIDIA-H200",
}
MODEL_NAME = {
    "A100": "NVIDIA A100-SXM4-80GB",
    "H100": "NVIDIA H100 80GB HBM3",
    "H200": "NVIDIA H200",
}
POOL_LABEL = "gpufleet.io/pool"
RANK_LABELS = {
    "training.kubeflow.org/job-name": "training.kubeflow.org/replica-index",
    "jobset.sigs.k8s.io/jobset-name": "jobset.sigs.k8s.io/job-index",
    "batch.kubernetes.io/job-name": "batch.kubernetes.io/job-completion-index",
    "job-name": "batch.kubernetes.io/job-completion-index",
    "volcano.sh/job-name": "volcano.sh/task-index",
}
OWNER_KIND = {
    "training.kubeflow.org/job-name": "PyTorchJob",
    "jobset.sigs.k8s.io/jobset-name": "Job",
    "batch.kubernetes.io/job-name": "Job",
    "job-name": "Job",
    "volcano.sh/job-name": "Job",
}


@dataclass(frozen=True, slots=True)
class SimNode:
    name: str
    pool: str
    model: str
    gpus: int
    labels: dict[str, str]


@dataclass(frozen=True, slots=True)
class SimPod:
    """A pod of a workload, with the labels a real operator would put on it."""

    namespace: str
    name: str
    workload: str
    """`namespace/name` of the workload (job)."""
    kind: WorkloadKind
    rank: int
    node: str
    gpu_indices: tuple[int, ...]
    """Device indices on the node."""
    labels: dict[str, str]
    owner_kind: str
    owner_name: str
    start: float
    end: float | None
    priority_class: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(slots=True)
class Layout:
    nodes: list[SimNode]
    pods: list[SimPod]
    gpu_uuid: StrArray
    gpu_node: IntArray
    gpu_device: IntArray
    gpu_model: StrArray
    gpu_pci: StrArray
    unplaced: list[str] = field(default_factory=list)
    """Workloads (namespace/name) that did not fit: the scenario asked for more GPUs than exist."""

    def node_position(self) -> dict[str, int]:
        return {n.name: i for i, n in enumerate(self.nodes)}

    def gpu_position(self, node: str, device: int) -> int:
        idx = self.node_position()[node]
        hits = np.flatnonzero((self.gpu_node == idx) & (self.gpu_device == device))
        if hits.size == 0:
            raise KeyError(f"{node}/gpu{device}")
        return int(hits[0])


def gpu_uuid(cluster: str, node: str, device: int) -> str:
    return "GPU-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"gpufleet:{cluster}/{node}/{device}"))


def node_name(pool: str, i: int) -> str:
    return f"{pool}-{i:04d}"


def _pod_labels(w: Workload, rank: int) -> dict[str, str]:
    if w.kind == WorkloadKind.TRAINING:
        labels = {w.job_label: w.name, RANK_LABELS[w.job_label]: str(rank)}
        if w.job_label == "training.kubeflow.org/job-name":
            labels["training.kubeflow.org/replica-type"] = "worker"
        return {**w.labels, **labels}
    return {**w.labels, "app": w.name}


def _pod_name(w: Workload, rank: int) -> str:
    if w.kind == WorkloadKind.TRAINING:
        return f"{w.name}-worker-{rank}"
    return f"{w.name}-{rank}"


def build_layout(sc: Scenario) -> Layout:
    """Nodes in pool order, GPUs in node order, workloads placed first-fit in file order."""
    nodes = _nodes(sc)
    uuids, node_idx, device, models, pcis = _gpu_columns(sc, nodes)
    replicas = {p.name: p.time_slicing for p in sc.pools}
    free = {n.name: [d for d in range(n.gpus) for _ in range(replicas[n.pool])] for n in nodes}
    pods: list[SimPod] = []
    unplaced: list[str] = []
    for w in sc.workloads:
        placed = _place(sc, w, [n for n in nodes if w.pool is None or n.pool == w.pool], free)
        if len(placed) < w.replicas:
            unplaced.append(f"{w.namespace}/{w.name}")
            for pod in placed:  # all or nothing, like a gang scheduler
                free[pod.node].extend(pod.gpu_indices)
                free[pod.node].sort()
            continue
        pods.extend(placed)
    return Layout(nodes, pods, uuids, node_idx, device, models, pcis, unplaced)


def _nodes(sc: Scenario) -> list[SimNode]:
    """Every pool's nodes with the labels GPU feature discovery would give them."""
    nodes: list[SimNode] = []
    for p in sc.pools:
        for i in range(p.nodes):
            name = node_name(p.name, i)
            labels = {
                "kubernetes.io/hostname": name,
                POOL_LABEL: p.name,
                "nvidia.com/gpu.product": GPU_PRODUCT[p.model.value],
                "nvidia.com/gpu.count": str(p.gpus_per_node),
                **p.labels,
            }
            if p.time_slicing > 1:  # what GPU feature discovery labels a time-sliced node
                labels["nvidia.com/gpu.replicas"] = str(p.time_slicing)
                labels["nvidia.com/gpu.sharing-strategy"] = "time-slicing"
            nodes.append(SimNode(name, p.name, p.model.value, p.gpus_per_node, labels))
    return nodes


def _gpu_columns(
    sc: Scenario, nodes: list[SimNode]
) -> tuple[StrArray, IntArray, IntArray, StrArray, StrArray]:
    """Per GPU in node order: UUID, node position, device index, model name, PCI bus id."""
    n_gpus = sum(n.gpus for n in nodes)
    uuids = np.empty(n_gpus, dtype=object)
    pcis = np.empty(n_gpus, dtype=object)
    models = np.empty(n_gpus, dtype=object)
    node_idx = np.empty(n_gpus, dtype=np.int32)
    device = np.empty(n_gpus, dtype=np.int32)
    row = 0
    for ni, n in enumerate(nodes):
        for d in range(n.gpus):
            uuids[row] = gpu_uuid(sc.cluster, n.name, d)
            pcis[row] = f"00000000:{0x18 + 0x10 * d:02X}:00.0"
            models[row] = MODEL_NAME[n.model]
            node_idx[row] = ni
            device[row] = d
            row += 1
    return uuids, node_idx, device, models, pcis


def _place(
    sc: Scenario, w: Workload, candidates: list[SimNode], free: dict[str, list[int]]
) -> list[SimPod]:
    """First-fit as many of the workload's replicas as fit, taking their GPUs from `free`."""
    placed: list[SimPod] = []
    for rank in range(w.replicas):
        host = next((n for n in candidates if len(set(free[n.name])) >= w.gpus_per_pod), None)
        if host is None:
            break
        gpus = tuple(sorted(set(free[host.name]))[: w.gpus_per_pod])
        for d in gpus:  # one replica of each device
            free[host.name].remove(d)
        job_label = w.job_label if w.kind == WorkloadKind.TRAINING else ""
        owner_kind = OWNER_KIND[job_label] if job_label else "ReplicaSet"
        placed.append(
            SimPod(
                namespace=w.namespace,
                name=_pod_name(w, rank),
                workload=f"{w.namespace}/{w.name}",
                kind=w.kind,
                rank=rank,
                node=host.name,
                gpu_indices=gpus,
                labels=_pod_labels(w, rank),
                owner_kind=owner_kind,
                owner_name=w.name,
                start=sc.start + w.start,
                end=None if w.end is None else sc.start + w.end,
                priority_class=w.priority_class,
            )
        )
    return placed
