"""kube-state-metrics and training-steps series of the simulated fleet, as (labels, value) rows.

Shared by the live text endpoints (exposition.py) and the OpenMetrics writer, built from the
placement passed in (serve mode passes the Kubernetes simulator's live pods and cordon set).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np

from simulator.engine import Sample
from simulator.kube_api.objects import GPU, node_resources
from simulator.layout import SimNode, SimPod
from simulator.series import escape, label_key, node_ip, pod_ip, pod_uid, sanitize

KUBE_HELP = {
    "kube_pod_info": "Information about pod.",
    "kube_pod_labels": "Kubernetes labels converted to Prometheus labels.",
    "kube_node_info": "Information about a cluster node.",
    "kube_node_labels": "Kubernetes labels converted to Prometheus labels.",
    "kube_node_spec_unschedulable": "Whether a node can schedule new pods.",
    "kube_node_status_capacity": "The capacity for different resources of a node.",
    "kube_node_status_allocatable": "The allocatable for different resources of a node that "
    "are available for scheduling.",
}
STEPS_HELP = "Optimizer steps completed by this pod."


def _labels(pairs: Sequence[tuple[str, str]]) -> str:
    return ",".join(f'{k}="{escape(v)}"' for k, v in pairs)


_UNITS = {"cpu": "core", "memory": "byte", "ephemeral-storage": "byte", "pods": "integer"}
"""kube-state-metrics' `unit` per resource; extended resources (`nvidia.com/gpu`) are
`integer`, and the resource name is sanitised (`nvidia_com_gpu`, `ephemeral_storage`)."""
_SUFFIX = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3}


def _quantity(q: str) -> float:
    for suffix, factor in _SUFFIX.items():
        if q.endswith(suffix):
            return float(q[: -len(suffix)]) * factor
    return float(q)


def _resource_rows(node: str, resources: Mapping[str, str]) -> list[tuple[str, float]]:
    rows = []
    for r, q in resources.items():
        unit = _UNITS.get(r, "integer")
        rows.append(
            (_labels([("node", node), ("resource", sanitize(r)), ("unit", unit)]), _quantity(q))
        )
    return rows


def active_pods(pods: Sequence[SimPod], t: float) -> list[tuple[int, SimPod]]:
    return [(i, p) for i, p in enumerate(pods) if p.start <= t < (p.end or float("inf"))]


def kube_state_series(
    sample: Sample,
    nodes: Sequence[SimNode],
    pods: Sequence[SimPod] | None = None,
    unschedulable: Collection[str] = (),
    cluster: str = "sim",
    pod_uids: Mapping[str, str] | None = None,
    gpu_allocatable: Mapping[str, int] | None = None,
) -> dict[str, list[tuple[str, float]]]:
    """kube-state-metrics families -> [(label string, value)] for the pods active at sample.t.

    `pod_uids` (`namespace/name` -> uid) lets serve mode show the UIDs its Kubernetes API
    serves; without it a stable UID is derived from the pod (series.pod_uid).
    `gpu_allocatable` (node -> allocatable `nvidia.com/gpu`): what the device plugin left after
    withdrawing Unhealthy GPUs (serve mode passes its node objects'); default: every GPU.
    """
    pods = sample.pods if pods is None else pods
    out: dict[str, list[tuple[str, float]]] = {k: [] for k in KUBE_HELP}
    for i, n in enumerate(nodes):
        _node_rows(out, i, n, cluster, n.name in unschedulable, gpu_allocatable)
    node_pos = {n.name: i for i, n in enumerate(nodes)}
    for _, p in active_pods(pods, sample.t):
        _pod_rows(out, p, (pod_uids or {}).get(p.key) or pod_uid(cluster, p), node_pos)
    return out


def _node_rows(
    out: dict[str, list[tuple[str, float]]],
    i: int,
    n: SimNode,
    cluster: str,
    unschedulable: bool,
    gpu_allocatable: Mapping[str, int] | None,
) -> None:
    """One node's kube_node_* rows: info, labels, cordon, capacity and allocatable."""
    out["kube_node_info"].append(
        (
            _labels(
                [
                    ("node", n.name),
                    ("container_runtime_version", "containerd://1.7.13"),
                    ("kernel_version", "5.15.0-105-generic"),
                    ("kubelet_version", "v1.29.4"),
                    ("kube_proxy_version", "v1.29.4"),
                    ("os_image", "Ubuntu 22.04.4 LTS"),
                    ("provider_id", f"gpufleet://{cluster}/{n.name}"),
                    ("internal_ip", node_ip(i)),
                    ("pod_cidr", f"10.{128 + i // 256 % 64}.{i % 256}.0/24"),
                ]
            ),
            1.0,
        )
    )
    node_labels = [("node", n.name)] + [(label_key(k), v) for k, v in sorted(n.labels.items())]
    out["kube_node_labels"].append((_labels(node_labels), 1.0))
    out["kube_node_spec_unschedulable"].append(
        (_labels([("node", n.name)]), 1.0 if unschedulable else 0.0)
    )
    capacity, allocatable = node_resources(n)
    if gpu_allocatable is not None and n.name in gpu_allocatable:
        allocatable[GPU] = str(gpu_allocatable[n.name])
    out["kube_node_status_capacity"] += _resource_rows(n.name, capacity)
    out["kube_node_status_allocatable"] += _resource_rows(n.name, allocatable)


def _pod_rows(
    out: dict[str, list[tuple[str, float]]], p: SimPod, uid: str, node_pos: Mapping[str, int]
) -> None:
    """One active pod's kube_pod_info and kube_pod_labels rows."""
    base = [("namespace", p.namespace), ("pod", p.name), ("uid", uid)]
    host = node_ip(node_pos[p.node]) if p.node in node_pos else ""
    info = [
        *base,
        ("host_ip", host),
        ("pod_ip", pod_ip(p)),
        ("node", p.node),
        ("created_by_kind", p.owner_kind),
        ("created_by_name", p.owner_name),
        ("priority_class", p.priority_class or ""),
        ("host_network", "false"),
    ]
    out["kube_pod_info"].append((_labels(info), 1.0))
    pod_labels = base + [(label_key(k), v) for k, v in sorted(p.labels.items())]
    out["kube_pod_labels"].append((_labels(pod_labels), 1.0))


def steps_series(sample: Sample, pods: Sequence[SimPod] | None = None) -> list[tuple[str, float]]:
    pods = sample.pods if pods is None else pods
    out: list[tuple[str, float]] = []
    for i, p in enumerate(pods):
        if i < sample.pod_steps.shape[0] and not np.isnan(sample.pod_steps[i]):
            out.append(
                (_labels([("namespace", p.namespace), ("pod", p.name)]), float(sample.pod_steps[i]))
            )
    return out
