"""The fleet model: one frozen, typed snapshot of the fleet that every later stage reads.

Per-GPU data is columnar (numpy arrays indexed by GPU position) so that a 100k-GPU fleet is a
handful of arrays rather than 100k objects; nodes, pods and jobs are small frozen records because
there are far fewer of them and people read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NewType

import numpy as np
import numpy.typing as npt

NodeName = NewType("NodeName", str)
GpuUuid = NewType("GpuUuid", str)
JobKey = NewType("JobKey", str)
"""`namespace/name` of a training or inference job."""
PodKey = NewType("PodKey", str)
"""`namespace/name` of a pod."""

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int32]
BoolArray = npt.NDArray[np.bool_]
StrArray = npt.NDArray[np.object_]

NO_INDEX = -1
"""Marks "none" in integer index columns (GPU without pod, pod without job, ...)."""

_EMPTY: Mapping[str, str] = MappingProxyType({})


def frozen_map(items: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """A read-only copy, so a snapshot cannot be changed through a label dict."""
    return MappingProxyType(dict(items)) if items else _EMPTY


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute


@dataclass(frozen=True, slots=True)
class Node:
    name: NodeName
    labels: Mapping[str, str] = field(default_factory=frozen_map)
    annotations: Mapping[str, str] = field(default_factory=frozen_map)
    taints: tuple[Taint, ...] = ()
    schedulable: bool = True
    conditions: Mapping[str, str] = field(default_factory=frozen_map)
    """Condition type -> status ("True" / "False" / "Unknown"), e.g. {"Ready": "True"}."""
    in_kubernetes: bool = True
    """False for a node known only from GPU metrics (its `Hostname`), not from Kubernetes."""
    gpu_capacity: int | None = None
    """`status.capacity["nvidia.com/gpu"]` (Kubernetes API, or kube-state-metrics'
    `kube_node_status_capacity{resource="nvidia_com_gpu"}`); None: not collected."""
    gpu_allocatable: int | None = None
    """`status.allocatable["nvidia.com/gpu"]`: below capacity once the NVIDIA device plugin has
    marked a GPU Unhealthy (critical XIDs) and withdrawn it; None: not collected."""

    @property
    def gpus_withdrawn(self) -> int | None:
        """Capacity minus allocatable GPUs; None when either count is unknown."""
        if self.gpu_capacity is None or self.gpu_allocatable is None:
            return None
        return self.gpu_capacity - self.gpu_allocatable

    @property
    def ready(self) -> bool:
        return self.conditions.get("Ready", "Unknown") == "True"


@dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    name: str
    node: NodeName | None
    phase: str = "Running"
    labels: Mapping[str, str] = field(default_factory=frozen_map)
    owner_kind: str | None = None
    owner_name: str | None = None
    priority_class: str | None = None
    job_index: int = NO_INDEX
    """Position of the pod's job in `FleetSnapshot.jobs`, or NO_INDEX."""
    rank: int = NO_INDEX
    gpus: int = 0
    """GPUs the pod requests (`nvidia.com/gpu` limits, from the Kubernetes API; 0: unknown or
    none). Used only to attribute GPUs by node when DCGM series carry no pod labels."""

    @property
    def key(self) -> PodKey:
        return PodKey(f"{self.namespace}/{self.name}")


@dataclass(frozen=True, slots=True)
class Job:
    """A distributed job: its ranks in rank order, each a pod on a node with its GPUs."""

    key: JobKey
    kind: str
    """The label key that named the job (e.g. `training.kubeflow.org/job-name`)."""
    pod_indices: tuple[int, ...]
    """Positions in `FleetSnapshot.pods`, in rank order."""

    @property
    def namespace(self) -> str:
        return self.key.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.key.split("/", 1)[1]


@dataclass(frozen=True, slots=True)
class GpuTable:
    """All GPUs of the fleet, one row per GPU, as parallel columns."""

    uuid: StrArray
    node_index: IntArray
    """Position in `FleetSnapshot.nodes`."""
    device_index: IntArray
    """The `gpu` label: the device's index on its node."""
    model_index: IntArray
    """Position in `models`."""
    models: tuple[str, ...]
    pod_index: IntArray
    """Position in `FleetSnapshot.pods` of the pod the GPU is allocated to, or NO_INDEX."""
    job_index: IntArray
    """Position in `FleetSnapshot.jobs`, or NO_INDEX (derived from the pod, stored for speed)."""
    mig_instance: StrArray
    """`GPU_I_ID` for MIG slices, "" for a whole GPU."""
    mig_profile: StrArray
    pci_bus_id: StrArray

    def __len__(self) -> int:
        return int(self.uuid.shape[0])

    def position(self, uuid: str) -> int:
        """Row of a GPU by UUID (O(n); hot paths work on positions, not UUIDs)."""
        hits = np.flatnonzero(self.uuid == uuid)
        if hits.size == 0:
            raise KeyError(uuid)
        return int(hits[0])


@dataclass(frozen=True, slots=True)
class MetricColumn:
    """One metric across all GPUs: the latest value and its sample time (NaN where absent).

    For counters, `increase` holds the reset-aware increase over the collector's window and
    `window_seconds` its length; both are NaN/0 for gauges. `span`, when given, is per GPU the
    seconds that GPU's increase actually covers (>= `window_seconds`; longer when its samples or
    the collector's cycles were further apart than the window, or just after a cold start):
    an increment is never dropped, and a rate divides by the span so it does not inflate.
    None means `window_seconds` for every GPU.
    """

    value: FloatArray
    timestamp: FloatArray
    increase: FloatArray | None = None
    window_seconds: float = 0.0
    span: FloatArray | None = None

    def present(self) -> BoolArray:
        return ~np.isnan(self.value)

    def seconds(self) -> FloatArray | float:
        """Per GPU, the seconds `increase` covers (`window_seconds` where no span is given)."""
        if self.span is None:
            return self.window_seconds
        return np.where(np.isnan(self.span), self.window_seconds, self.span)

    def rate(self) -> FloatArray:
        """Per-second rate of a counter over the seconds its increase covers (NaN without a
        window)."""
        if self.increase is None or self.window_seconds <= 0:
            return np.full_like(self.value, np.nan)
        out: FloatArray = self.increase / self.seconds()
        return out


@dataclass(frozen=True, slots=True)
class TelemetryHealth:
    """How fresh each node's exporter is, so that "no data" is never read as "GPU gone"."""

    node_last_sample: FloatArray
    """Per node (same order as nodes): newest DCGM sample time, NaN if the node never reported."""
    node_up: BoolArray
    """Per node: the exporter answered its last scrape (`up == 1`), as far as we know."""
    scrape_interval: float
    """Inferred exporter scrape interval in seconds (15 or 30 for dcgm-exporter)."""
    source_ok: bool = True
    """False when the source itself (Prometheus, the scrape round) failed or was partial."""
    degraded_reason: str = ""

    def node_age(self, now: float) -> FloatArray:
        return now - self.node_last_sample


@dataclass(frozen=True, slots=True)
class Event:
    """A Kubernetes Warning event (or exporter-side XID line) that concerns a node or a GPU."""

    time: float
    reason: str
    message: str
    node: NodeName | None = None
    gpu_uuid: GpuUuid | None = None
    source: str = ""
    involved_kind: str = "Node"
    involved_name: str = ""
    count: int = 1


@dataclass(frozen=True, slots=True)
class FleetSnapshot:
    """Everything the detectors may know about the fleet at `taken_at` (unix seconds)."""

    taken_at: float
    nodes: tuple[Node, ...]
    gpus: GpuTable
    pods: tuple[Pod, ...]
    jobs: tuple[Job, ...]
    metrics: Mapping[str, MetricColumn]
    """DCGM field name (e.g. `DCGM_FI_DEV_GPU_UTIL`) -> column over `gpus`."""
    job_steps: Mapping[JobKey, float] = field(default_factory=dict)
    """`training_steps_total` summed over the job's pods (absent where jobs do not export it)."""
    job_steps_increase: Mapping[JobKey, float] = field(default_factory=dict)
    """Increase of `training_steps_total` over the collector's window, per job."""
    telemetry: TelemetryHealth | None = None
    events: tuple[Event, ...] = ()
    cluster: str = "default"
    shared_pods: tuple[tuple[int, int], ...] = ()
    """(GPU position, pod position) of each pod holding a time-sliced GPU besides the GPU's
    `pod_index` (dcgm-exporter's virtual-GPU series), so that every pod on a GPU is attributed."""

    def metric(self, name: str) -> MetricColumn | None:
        return self.metrics.get(name)

    def node_names(self) -> tuple[NodeName, ...]:
        return tuple(n.name for n in self.nodes)

    def node_index(self) -> Mapping[str, int]:
        return {n.name: i for i, n in enumerate(self.nodes)}

    def gpus_of_job(self, job_index: int) -> IntArray:
        """The job's GPUs, those it shares with other pods' jobs included."""
        own = self.gpus.job_index == job_index
        for g, p in self.shared_pods:
            if self.pods[p].job_index == job_index:
                own[g] = True
        return np.flatnonzero(own).astype(np.int32)

    def pods_on_gpu(self, gpu: int) -> tuple[int, ...]:
        """Positions of every pod holding the GPU: its `pod_index`, then the pods sharing it."""
        own = int(self.gpus.pod_index[gpu])
        shared = tuple(p for g, p in self.shared_pods if g == gpu)
        return ((own,) if own != NO_INDEX else ()) + shared
