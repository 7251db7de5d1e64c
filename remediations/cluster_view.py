"""What the remediation engine knows about the cluster when it decides: nodes, pods, jobs.

A compact, frozen index over the observer's FleetSnapshot (`from_snapshot`: what the live cycle
hands `RemediationCycle.tick`), over API objects (`from_objects`: the actuator's reader,
`kube.reader`), or over findings alone when there is no cluster data (`from_findings`), so that
gates and playbooks plan against data handed to them and never fetch it themselves.
`ClusterReader` (remediations/capabilities.py) is the live reads a playbook's verification
makes at write time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from detectors.findings import Finding
from observer.fleet.model import NO_INDEX, FleetSnapshot
from remediations.cluster_names import GPU_COUNT_LABEL
from remediations.types import OWNER_ANNOTATION


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[tuple[str, str, str], ...] = ()
    """(key, value, effect)."""
    unschedulable: bool = False
    gpu_count: int = 0
    ready: bool = True
    boot_id: str = ""
    """`status.nodeInfo.bootID`: changes on every reboot (empty when unknown)."""
    gpu_capacity: int | None = None
    """`status.capacity["nvidia.com/gpu"]`; None when not collected (only metrics were seen).
    From a snapshot it is the collector's copy; evict_gpu_pods' keep-schedulable guard still
    reads the live node at write time (kube.actuator)."""
    gpu_allocatable: int | None = None
    """`status.allocatable["nvidia.com/gpu"]`: below capacity once the device plugin has marked
    a GPU Unhealthy (the kubelet then hands that GPU to no new pod)."""

    @property
    def is_gpu_node(self) -> bool:
        return self.gpu_count > 0

    @property
    def cordoned_by_us(self) -> bool:
        return self.annotations.get(OWNER_ANNOTATION) is not None


@dataclass(frozen=True, slots=True)
class PodView:
    namespace: str
    name: str
    node: str | None
    uid: str | None = None
    phase: str = "Running"
    labels: Mapping[str, str] = field(default_factory=dict)
    owner_kind: str | None = None
    owner_name: str | None = None
    priority_class: str | None = None
    mirror: bool = False
    job: str | None = None
    """`namespace/name` of the job the pod is a rank of, if any."""
    created: float | None = None
    """`metadata.creationTimestamp` (epoch seconds); None when only metrics were seen."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class JobView:
    key: str
    label: str
    """The label key that names the job's pods (`<label>=<name>` selects them)."""
    pods: tuple[str, ...]
    """Pod keys in rank order."""

    @property
    def namespace(self) -> str:
        return self.key.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.key.split("/", 1)[1]


@dataclass(frozen=True, slots=True)
class ClusterView:
    nodes: Mapping[str, NodeView]
    pods: Mapping[str, PodView] = field(default_factory=dict)
    jobs: Mapping[str, JobView] = field(default_factory=dict)
    pod_of_gpu: Mapping[str, str] = field(default_factory=dict)
    """GPU UUID -> pod key it is allocated to."""
    taken_at: float = 0.0
    pods_by_node: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Derived at construction when not given: node -> pod keys."""
    gpus_of_node: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Node -> UUIDs of the GPUs its exporter reports (empty when the view has no metrics)."""
    complete: bool = True
    """False when the view was guessed from findings alone (no cluster data): the fleet's size is
    unknown, so the circuit breaker cannot compute its share and stays out of it."""
    gpu_index: Mapping[str, int] = field(default_factory=dict)
    """GPU UUID -> its index on the node (DCGM's `gpu` label), where the snapshot knows it."""
    device_taints: bool | None = None
    """Whether the cluster serves DeviceTaintRules (single-GPU fencing); None: not known."""
    sharers_of_gpu: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """GPU UUID -> the other pods holding a time-sliced GPU (FleetSnapshot.shared_pods): a GPU
    is free only when all of them are."""

    def __post_init__(self) -> None:
        if not self.pods_by_node and self.pods:
            index: dict[str, list[str]] = {}
            for key, p in self.pods.items():
                if p.node is not None:
                    index.setdefault(p.node, []).append(key)
            object.__setattr__(self, "pods_by_node", {n: tuple(keys) for n, keys in index.items()})

    def pods_on(self, node: str) -> list[PodView]:
        return [self.pods[k] for k in self.pods_by_node.get(node, ())]

    def gpu_nodes(self) -> list[NodeView]:
        return [n for n in self.nodes.values() if n.is_gpu_node]

    @staticmethod
    def from_findings(findings: Sequence[Finding]) -> ClusterView:
        """A minimal view when no cluster data exists (a cycle that collected nothing, a backtest
        on metrics alone): every node a finding names is a GPU node, and the view says it is
        incomplete. Blast-radius shares are then relative to those nodes only."""
        names = {f.node for f in findings if f.node}
        return ClusterView({n: NodeView(n, gpu_count=1) for n in sorted(names)}, complete=False)

    @staticmethod
    def from_objects(
        nodes: Iterable[NodeView],
        pods: Iterable[PodView],
        job_label_keys: Sequence[str],
        *,
        taken_at: float = 0.0,
        device_taints: bool | None = None,
    ) -> ClusterView:
        """The view of nodes and pods read from the API (a playbook's live reads, tests):
        jobs grouped by the first of `job_label_keys` each pod carries, ranks sorted."""
        node_list, pod_list = list(nodes), list(pods)
        jobs: dict[str, tuple[str, list[str]]] = {}
        for p in pod_list:
            if p.job is not None:
                key = next(k for k in job_label_keys if k in p.labels)
                jobs.setdefault(p.job, (key, []))[1].append(p.key)
        return ClusterView(
            {n.name: n for n in node_list},
            {p.key: p for p in pod_list},
            {j: JobView(j, key, tuple(sorted(keys))) for j, (key, keys) in jobs.items()},
            taken_at=taken_at,
            device_taints=device_taints,
        )

    @staticmethod
    def from_snapshot(snap: FleetSnapshot) -> ClusterView:
        counts = (
            np.bincount(snap.gpus.node_index, minlength=len(snap.nodes))
            if len(snap.gpus)
            else np.zeros(len(snap.nodes), dtype=np.int64)
        )
        nodes: dict[str, NodeView] = {}
        for i, n in enumerate(snap.nodes):
            label_count = n.labels.get(GPU_COUNT_LABEL, "")
            gpus = int(counts[i]) or (int(label_count) if label_count.isdigit() else 0)
            nodes[n.name] = NodeView(
                name=n.name,
                labels=n.labels,
                annotations=n.annotations,
                taints=tuple((t.key, t.value, t.effect) for t in n.taints),
                unschedulable=not n.schedulable,
                gpu_count=gpus,
                ready=n.ready,
                gpu_capacity=n.gpu_capacity,
                gpu_allocatable=n.gpu_allocatable,
            )
        pods: dict[str, PodView] = {}
        for p in snap.pods:
            job = snap.jobs[p.job_index].key if p.job_index != NO_INDEX else None
            pods[p.key] = PodView(
                namespace=p.namespace,
                name=p.name,
                node=p.node,
                phase=p.phase,
                labels=p.labels,
                owner_kind=p.owner_kind,
                owner_name=p.owner_name,
                priority_class=p.priority_class,
                job=job,
            )
        jobs: dict[str, JobView] = {
            str(j.key): JobView(j.key, j.kind, tuple(snap.pods[i].key for i in j.pod_indices))
            for j in snap.jobs
        }
        pod_of_gpu: dict[str, str] = {
            str(snap.gpus.uuid[g]): str(snap.pods[int(pi)].key)
            for g, pi in enumerate(snap.gpus.pod_index)
            if pi != NO_INDEX
        }
        sharers: dict[str, list[str]] = {}
        for g, pi in snap.shared_pods:
            sharers.setdefault(str(snap.gpus.uuid[g]), []).append(str(snap.pods[pi].key))
        gpu_index = {
            str(u): int(i)
            for u, i in zip(snap.gpus.uuid, snap.gpus.device_index, strict=True)
            if i >= 0
        }
        gpus_of_node: dict[str, list[str]] = {}
        for g, ni in enumerate(snap.gpus.node_index):
            gpus_of_node.setdefault(snap.nodes[int(ni)].name, []).append(str(snap.gpus.uuid[g]))
        return ClusterView(
            nodes,
            pods,
            jobs,
            pod_of_gpu,
            snap.taken_at,
            gpu_index=gpu_index,
            gpus_of_node={n: tuple(u) for n, u in gpus_of_node.items()},
            sharers_of_gpu={u: tuple(k) for u, k in sharers.items()},
        )


class SnapshotViews:
    """The cluster view of each snapshot, rebuilt only when what it is made of changed (nodes,
    pods, jobs, which GPU is where, with which pods and device index): between such changes,
    cycles and replay steps share one view, stamped with their own time. At 12,500 nodes a
    rebuild costs ~0.4 s, so the live cycle and backtests alike pay it only on a change."""

    def __init__(self) -> None:
        self._last: tuple[tuple[object, ...], tuple[np.ndarray, ...], ClusterView] | None = None
        """(what the view was built from, the view), swapped as one: the service's jobs read
        it from their own thread."""

    def __call__(self, snap: FleetSnapshot) -> ClusterView:
        key = (snap.nodes, snap.pods, snap.jobs, snap.shared_pods)
        g = snap.gpus
        gpus = (g.uuid, g.node_index, g.pod_index, g.device_index)
        last = self._last
        if (
            last is not None
            and key == last[0]
            and all(np.array_equal(a, b) for a, b in zip(gpus, last[1], strict=True))
        ):
            return replace(last[2], taken_at=snap.taken_at)
        view = ClusterView.from_snapshot(snap)
        self._last = (key, gpus, view)
        return view

    @property
    def built(self) -> ClusterView | None:
        """The view as last rebuilt (the same object until what it is made of changes)."""
        return None if self._last is None else self._last[2]
