"""Series identity and value formatting shared by the live endpoints and the OpenMetrics writer.

Labels are written exactly as dcgm-exporter and kube-state-metrics write them, so a collector
that works against the simulator works against a real fleet. Formatting is done per column
(numpy -> list -> str.join), because a 10k-GPU backfill writes tens of millions of samples.
"""

from __future__ import annotations

import re
import uuid as uuidlib
import zlib
from collections.abc import Sequence

import numpy as np

from observer.fleet.model import FloatArray
from simulator.layout import Layout, SimPod
from simulator.scenario import WorkloadKind

DRIVER_VERSION = "550.90.07"
CONTAINER = {
    WorkloadKind.TRAINING: "pytorch",
    WorkloadKind.INFERENCE: "server",
    WorkloadKind.IDLE: "notebook",
}
"""Container names (Kubeflow's PyTorchJob names its container `pytorch`)."""
FLOAT_FAMILIES = frozenset(
    {
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
    }
)
"""Families with fractional values; every other DCGM field is an integer."""
_LABEL_KEY = re.compile(r"[^a-zA-Z0-9_]")


def escape(value: str) -> str:
    """A label value as the text formats require (backslash, quote, newline escaped)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def label_key(key: str) -> str:
    """kube-state-metrics' `label_<key>` name: every invalid character becomes `_`."""
    return "label_" + sanitize(key)


def sanitize(name: str) -> str:
    """kube-state-metrics' sanitizeLabelName: every invalid character becomes `_`
    (`nvidia.com/gpu` -> `nvidia_com_gpu`)."""
    return _LABEL_KEY.sub("_", name)


def pod_uid(cluster: str, pod: SimPod) -> str:
    """A stable UID for a simulated pod (a recreated pod has a new start and so a new UID)."""
    name = f"gpufleet:{cluster}/pod/{pod.namespace}/{pod.name}/{pod.start}"
    return str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, name))


def pod_ip(pod: SimPod) -> str:
    h = zlib.crc32(f"{pod.namespace}/{pod.name}/{pod.start}".encode())
    return f"10.{128 + (h >> 16) % 64}.{(h >> 8) % 256}.{max(2, h % 254)}"


def node_ip(position: int) -> str:
    return f"10.0.{position // 250}.{position % 250 + 2}"


def container_name(pod: SimPod) -> str:
    return CONTAINER.get(pod.kind, "main")


HOSTNAME_MODES = ("node", "fqdn", "pod", "host")
"""What dcgm-exporter's `Hostname` says: the node's name (`NODE_NAME` set, as the Helm chart and
the GPU Operator do), the host's fully qualified name (hostNetwork without `NODE_NAME`), or the
exporter pod's name (its hostname without `NODE_NAME`), or a host name unrelated to the node's
(a node registered under another name): only the exporter pod's node joins that one."""


def exporter_hostname(node: str, mode: str = "node") -> str:
    if mode == "fqdn":
        return f"{node}.gpu.example.internal"
    if mode == "pod":
        return exporter_pod_name(node)
    if mode == "host":
        return f"host-{zlib.crc32(node.encode()):08x}"
    return node


def exporter_pod_name(node: str) -> str:
    """The simulated dcgm-exporter pod on `node` (the name Prometheus' discovery reports)."""
    return f"nvidia-dcgm-exporter-{node}"


def gpu_static_labels(
    layout: Layout, gpus: Sequence[int] | None = None, hostname: str = "node"
) -> list[str]:
    """Per GPU (all, or the positions given): dcgm-exporter's labels before the Kubernetes ones;
    `hostname`: one of HOSTNAME_MODES."""
    out: list[str] = []
    for i in range(int(layout.gpu_uuid.shape[0])) if gpus is None else gpus:
        node = exporter_hostname(layout.nodes[int(layout.gpu_node[i])].name, hostname)
        dev = int(layout.gpu_device[i])
        out.append(
            f'gpu="{dev}",UUID="{layout.gpu_uuid[i]}",pci_bus_id="{layout.gpu_pci[i]}",'
            f'device="nvidia{dev}",modelName="{escape(str(layout.gpu_model[i]))}",'
            f'Hostname="{node}",DCGM_FI_DRIVER_VERSION="{DRIVER_VERSION}"'
        )
    return out


POD_LABEL_LAYOUTS = ("direct", "exported", "none")
"""How a GPU's workload reaches Prometheus: dcgm-exporter's `pod`/`namespace`/`container`
(`direct`: honorLabels), the same as `exported_*` beside the exporter's own target labels
(`exported`: a ServiceMonitor without honorLabels), or not at all (`none`: the exporter's
Kubernetes mapping off; only the exporter's target labels)."""
EXPORTER_NAMESPACE = "gpu-operator"


def pod_label_part(pod: SimPod, layout: str = "direct") -> str:
    if layout == "none":
        return ""
    p = "exported_" if layout == "exported" else ""
    return (
        f',{p}container="{container_name(pod)}",{p}namespace="{escape(pod.namespace)}",'
        f'{p}pod="{escape(pod.name)}"'
    )


def exporter_target_labels(node: str) -> str:
    """The labels Prometheus' Kubernetes service discovery adds for the exporter pod on `node`."""
    return (
        f',container="nvidia-dcgm-exporter",namespace="{EXPORTER_NAMESPACE}",'
        f'pod="{escape(exporter_pod_name(node))}"'
    )


class GpuLabelCache:
    """Full per-GPU label strings for a placement, rebuilt only when the placement changes."""

    def __init__(
        self,
        layout: Layout,
        extra: Sequence[str] | None = None,
        pod_labels: str = "direct",
        hostname: str = "node",
    ) -> None:
        self.pod_labels = pod_labels
        self._static = gpu_static_labels(layout, hostname=hostname)
        if extra is not None:
            self._static = [s + e for s, e in zip(self._static, extra, strict=True)]
        self._key: tuple[bytes, tuple[int, ...]] | None = None
        self._labels: list[str] = []

    def labels(self, gpu_pod: np.ndarray, pods: Sequence[SimPod]) -> list[str]:
        key = (gpu_pod.tobytes(), tuple(id(p) for p in pods))
        if key != self._key:
            parts = [pod_label_part(p, self.pod_labels) for p in pods]
            self._labels = [
                s if k < 0 else s + parts[k]
                for s, k in zip(self._static, gpu_pod.tolist(), strict=True)
            ]
            self._key = key
        return self._labels


def format_values(values: FloatArray, integral: bool) -> list[str]:
    """Sample values as text; integers without a fractional part, like dcgm-exporter."""
    if integral:
        return list(map(str, values.astype(np.int64).tolist()))
    return list(map(repr, values.tolist()))


def sample_lines(
    name: str, labels: Sequence[str], values: FloatArray, integral: bool, suffix: str = "\n"
) -> str:
    """`name{labels} value<suffix>` for every non-NaN value (suffix carries a timestamp)."""
    idx = np.flatnonzero(~np.isnan(values))
    if idx.size == 0:
        return ""
    texts = format_values(values[idx], integral)
    head = name + "{"
    return "".join(
        [f"{head}{labels[i]}}} {v}{suffix}" for i, v in zip(idx.tolist(), texts, strict=True)]
    )
