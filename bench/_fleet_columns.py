"""Synthetic collector output for a fleet of any size: the snapshot benchmark's input.

Shaped like what the Prometheus collector hands the builder: one identity row per GPU (the
inventory query), one series per GPU per catalog metric whose label strings are fresh objects per
metric (as each PromQL answer is parsed separately), a few GPUs missing from some metrics (so the
lookup path, not only the fast path, is exercised), counters with increases, pods from Kubernetes
with the job labels of four operators, `training_steps_total` for half the pods, exporter `up`
per node and range-query sample times. Underscored: a helper, not a benchmark of `python -m bench`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from observer.fleet.catalog import METRICS, Kind
from observer.fleet.model import Event, IntArray, Node, NodeName, Pod, StrArray, frozen_map
from observer.snapshot.inputs import ExporterHealth, GpuColumns, MetricSeries, PodSeries

GPUS_PER_NODE = 8
OPERATORS = (
    ("training.kubeflow.org/job-name", "training.kubeflow.org/replica-index"),
    ("jobset.sigs.k8s.io/jobset-name", "jobset.sigs.k8s.io/job-index"),
    ("volcano.sh/job-name", "volcano.sh/task-index"),
    ("batch.kubernetes.io/job-name", "batch.kubernetes.io/job-completion-index"),
)
MODELS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA H200")


@dataclass(frozen=True, slots=True)
class FleetColumns:
    taken_at: float
    gpus: GpuColumns
    metrics: dict[str, MetricSeries]
    nodes: list[Node]
    pods: list[Pod]
    steps: PodSeries
    exporters: ExporterHealth
    events: list[Event]
    n_jobs: int


def _fresh(strings: np.ndarray) -> np.ndarray:
    """Equal strings as new objects (a separately parsed answer), same order."""
    out = np.empty(strings.shape[0], dtype=object)
    out[:] = [(s + ".")[:-1] for s in strings.tolist()]
    return out


def fleet_columns(n_gpus: int, pods_per_job: float = 12.5, seed: int = 0) -> FleetColumns:
    rng = np.random.default_rng(seed)
    now = 1_767_225_600.0
    n_nodes = n_gpus // GPUS_PER_NODE
    node_names = [f"gpu-node-{i:05d}" for i in range(n_nodes)]
    uuid, host, device, model, pci = _gpu_identity(rng, n_gpus, node_names)
    n_jobs = max(1, round(n_nodes / pods_per_job))
    pods, pod_name, pod_ns = _job_pods(node_names, n_gpus, n_jobs)
    gpus = GpuColumns(
        uuid=uuid,
        hostname=host,
        device_index=device,
        model_name=model,
        pci_bus_id=pci,
        pod=pod_name,
        namespace=pod_ns,
        timestamp=np.full(n_gpus, now - 5.0),
    )
    metrics = _metrics(rng, uuid, now)
    nodes = [
        Node(
            NodeName(x),
            labels=frozen_map({"kubernetes.io/hostname": x, "nvidia.com/gpu.count": "8"}),
            conditions=frozen_map({"Ready": "True"}),
        )
        for x in node_names
    ]
    half = np.arange(0, n_nodes, 2)
    steps = PodSeries(
        namespace=np.array([pods[i].namespace for i in half], dtype=object),
        pod=np.array([pods[i].name for i in half], dtype=object),
        value=rng.uniform(1e3, 1e5, half.size),
        timestamp=np.full(half.size, now - 3.0),
        increase=rng.uniform(0.0, 300.0, half.size),
    )
    exporters = ExporterHealth(
        up={x: True for x in node_names},
        sample_times=[now - 30.0 * np.arange(20)[::-1] + rng.normal(0, 0.3, 20) for _ in range(8)],
    )
    events = [
        Event(now - 60.0 * i, "XidError", f"Xid 79 on GPU {i}", NodeName(node_names[i]))
        for i in range(min(200, n_nodes))
    ]
    return FleetColumns(now, gpus, metrics, nodes, pods, steps, exporters, events, n_jobs)


def _gpu_identity(
    rng: np.random.Generator, n_gpus: int, node_names: list[str]
) -> tuple[StrArray, StrArray, IntArray, StrArray, StrArray]:
    """Per GPU (eight a node): random UUID, hostname, device index, model (three pools), PCI id."""
    n_nodes = len(node_names)
    gpu_node = np.repeat(np.arange(n_nodes), GPUS_PER_NODE)
    device = np.tile(np.arange(GPUS_PER_NODE, dtype=np.int32), n_nodes)
    uuid = np.empty(n_gpus, dtype=object)
    uuid[:] = [f"GPU-{rng.bytes(16).hex()}" for _ in range(n_gpus)]
    host = np.empty(n_gpus, dtype=object)
    host[:] = [node_names[i] for i in gpu_node]
    model = np.empty(n_gpus, dtype=object)
    model[:] = [MODELS[(i * 3) // max(n_nodes, 1)] for i in gpu_node]
    pci = np.empty(n_gpus, dtype=object)
    pci[:] = [f"00000000:{0x18 + 0x10 * d:02X}:00.0" for d in device.tolist()]
    return uuid, host, device, model, pci


def _job_pods(
    node_names: list[str], n_gpus: int, n_jobs: int
) -> tuple[list[Pod], StrArray, StrArray]:
    """One worker pod a node, nodes dealt to `n_jobs` jobs in runs, each job labelled the way
    one of the operators labels it; also each GPU's pod name and namespace."""
    n_nodes = len(node_names)
    job_of_node = np.minimum((np.arange(n_nodes) * n_jobs) // max(n_nodes, 1), n_jobs - 1)
    pods: list[Pod] = []
    pod_name = np.empty(n_gpus, dtype=object)
    pod_ns = np.empty(n_gpus, dtype=object)
    rank_in_job = np.arange(n_nodes) - np.searchsorted(job_of_node, job_of_node)
    for i in range(n_nodes):
        job, rank = int(job_of_node[i]), int(rank_in_job[i])
        job_label, index_label = OPERATORS[job % len(OPERATORS)]
        ns = f"team-{job % 20}"
        name = f"job-{job:04d}-worker-{rank}"
        labels = {job_label: f"job-{job:04d}", index_label: str(rank)}
        pods.append(
            Pod(ns, name, NodeName(node_names[i]), "Running", frozen_map(labels), "Job", name)
        )
        pod_name[i * GPUS_PER_NODE : (i + 1) * GPUS_PER_NODE] = name
        pod_ns[i * GPUS_PER_NODE : (i + 1) * GPUS_PER_NODE] = ns
    return pods, pod_name, pod_ns


def _metrics(rng: np.random.Generator, uuid: StrArray, now: float) -> dict[str, MetricSeries]:
    """Every catalog field with random values keyed by UUID; profiling fields miss a few GPUs."""
    n_gpus = len(uuid)
    metrics: dict[str, MetricSeries] = {}
    for spec in METRICS:
        keep = np.ones(n_gpus, dtype=bool)
        if spec.name.startswith("DCGM_FI_PROF_"):  # profiling series missing on a few GPUs
            keep[rng.choice(n_gpus, size=max(1, n_gpus // 1000), replace=False)] = False
        ts = now - rng.uniform(0.0, 15.0, n_gpus)
        metrics[spec.name] = MetricSeries(
            value=rng.uniform(0.0, 100.0, n_gpus)[keep],
            timestamp=ts[keep],
            uuid=_fresh(uuid[keep]),
            increase=rng.poisson(0.01, n_gpus).astype(np.float64)[keep]
            if spec.kind == Kind.COUNTER
            else None,
            window_seconds=300.0 if spec.kind == Kind.COUNTER else 0.0,
        )
    return metrics


def every_series_identity(fleet: FleetColumns) -> tuple[GpuColumns, dict[str, MetricSeries]]:
    """The same fleet as a collector that keeps the labels of every series would pass it:
    identity rows concatenated metric after metric (21 rows per GPU), series keyed by row."""
    g = fleet.gpus
    position = {u: i for i, u in enumerate(g.uuid.tolist())}
    parts, stamps, metrics, offset = [], [], {}, 0
    for name, s in fleet.metrics.items():
        assert s.uuid is not None
        parts.append(s.uuid)
        stamps.append(s.timestamp)
        rows = np.arange(offset, offset + len(s))
        metrics[name] = MetricSeries(
            s.value, s.timestamp, row=rows, increase=s.increase, window_seconds=s.window_seconds
        )
        offset += len(s)
    uuid = np.concatenate(parts)
    src = np.fromiter(map(position.__getitem__, uuid.tolist()), np.intp, count=uuid.size)

    def take(col: np.ndarray | None) -> np.ndarray | None:
        return None if col is None else col[src]

    cols = GpuColumns(
        uuid=uuid,
        hostname=g.hostname[src],
        device_index=g.device_index[src],
        model_name=g.model_name[src],
        pci_bus_id=take(g.pci_bus_id),
        pod=take(g.pod),
        namespace=take(g.namespace),
        timestamp=np.concatenate(stamps),
    )
    return cols, metrics
