"""Shared inputs for the snapshot builder tests: dcgm-exporter-like label rows and records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from observer.fleet.model import FleetSnapshot, Node, NodeName, Pod, frozen_map
from observer.snapshot.builder import build_snapshot
from observer.snapshot.inputs import GpuColumns, MetricSeries

NOW = 1_767_225_600.0
UTIL = "DCGM_FI_DEV_GPU_UTIL"
TEMP = "DCGM_FI_DEV_GPU_TEMP"


def obj(values: Sequence[str]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def gpu_rows(rows: Sequence[Mapping[str, str]], ts: Sequence[float] | None = None) -> GpuColumns:
    return GpuColumns.from_label_dicts(rows, ts)


def row(host: str, gpu: int, pod: str = "", ns: str = "", **extra: str) -> dict[str, str]:
    labels = {
        "UUID": f"GPU-{host}-{gpu}",
        "Hostname": host,
        "gpu": str(gpu),
        "modelName": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": f"00000000:{gpu:02X}:00.0",
        "pod": pod,
        "namespace": ns,
    }
    labels.update(extra)
    return labels


def series(
    uuids: Sequence[str], values: Sequence[float] | np.ndarray, ts: Sequence[float] | float = NOW
) -> MetricSeries:
    t = np.full(len(values), ts) if isinstance(ts, float) else np.asarray(ts, dtype=float)
    return MetricSeries(value=np.asarray(values, dtype=float), timestamp=t, uuid=obj(uuids))


def node(name: str) -> Node:
    return Node(NodeName(name), conditions=frozen_map({"Ready": "True"}))


def pod(ns: str, name: str, host: str | None, **labels: str) -> Pod:
    return Pod(ns, name, NodeName(host) if host else None, labels=frozen_map(labels))


def two_node_fleet() -> FleetSnapshot:
    rows = [row("n2", d, f"train-worker-{d // 2}", "ml") for d in range(4)]
    rows += [row("n1", d) for d in range(2)]
    uuids = [r["UUID"] for r in rows]
    pods = [
        pod(
            "ml",
            f"train-worker-{i}",
            "n2",
            **{
                "training.kubeflow.org/job-name": "train",
                "training.kubeflow.org/replica-index": str(i),
                "training.kubeflow.org/replica-type": "worker",
            },
        )
        for i in range(2)
    ]
    return build_snapshot(
        NOW,
        gpu_rows(rows),
        {UTIL: series(uuids, [10, 11, 12, 13, 14, 15])},
        nodes=[node("n1"), node("n2")],
        pods=pods,
    )
