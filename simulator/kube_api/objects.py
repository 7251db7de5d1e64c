"""JSON bodies of the Kubernetes objects a simulated GPU fleet consists of.

Nodes, the GPU operator's DaemonSets, PodDisruptionBudgets and Events (pods: `k8s_pods`), shaped
like a real API server returns them (field names, required fields, RFC 3339 times), so that the
real `kubernetes` client deserialises them and kubectl treats them as on a real cluster.
"""

from __future__ import annotations

import uuid as uuidlib
from datetime import UTC, datetime
from typing import Any

from simulator.layout import SimNode

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
GPU_NAMESPACE = "gpu-operator"
DAEMONSETS = ("nvidia-dcgm-exporter", "nvidia-device-plugin-daemonset")
KUBELET_VERSION = "v1.37.0"


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(ts: str | None) -> float | None:
    """An RFC 3339 time as the API writes it (`...Z`), as a Unix time; None for none."""
    if not ts:
        return None
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).astimezone(UTC).timestamp()


def new_uid(seed: str | None = None) -> str:
    if seed is not None:
        return str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"gpufleet-sim:{seed}"))
    return str(uuidlib.uuid4())


def object_meta(name: str, ts: float, namespace: str | None = None, uid: str | None = None) -> Obj:
    meta: Obj = {"name": name, "uid": uid or new_uid(), "creationTimestamp": rfc3339(ts)}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def node_ip(position: int) -> str:
    """The node's InternalIP (the same formula as the kube-state-metrics side)."""
    return f"10.0.{position // 250}.{position % 250 + 2}"


def node_resources(n: SimNode) -> tuple[dict[str, str], dict[str, str]]:
    """`status.capacity` and `status.allocatable` of a healthy node (the kubelet reserves some
    CPU and memory; the device plugin advertises every GPU)."""
    capacity = {
        "cpu": "192",
        "memory": "2113531604Ki",
        "ephemeral-storage": "3750000000Ki",
        "pods": "110",
        GPU: str(n.gpus),
    }
    return capacity, {**capacity, "cpu": "190", "memory": "2100000000Ki"}


def node_object(n: SimNode, index: int, ts: float, cluster: str) -> Obj:
    cond_time = rfc3339(ts)
    conditions = [
        ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID"),
        ("Ready", "True", "KubeletReady"),
    ]
    resources, allocatable = node_resources(n)
    meta = object_meta(n.name, ts, uid=new_uid(f"{cluster}/node/{n.name}"))
    meta["labels"] = {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": f"gpu-{n.model.lower()}-{n.gpus}x",
        **n.labels,
    }
    meta["annotations"] = {"node.alpha.kubernetes.io/ttl": "0"}
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": meta,
        "spec": {
            "podCIDR": f"10.244.{index % 256}.0/24",
            "providerID": f"sim://{cluster}/{n.name}",
        },
        "status": {
            "capacity": resources,
            "allocatable": allocatable,
            "conditions": [
                {
                    "type": t,
                    "status": s,
                    "reason": r,
                    "message": f"kubelet reports {t} {s}",
                    "lastHeartbeatTime": cond_time,
                    "lastTransitionTime": cond_time,
                }
                for t, s, r in conditions
            ],
            "addresses": [
                {"type": "InternalIP", "address": node_ip(index)},
                {"type": "Hostname", "address": n.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": new_uid(f"{cluster}/machine/{n.name}").replace("-", ""),
                "systemUUID": new_uid(f"{cluster}/system/{n.name}"),
                "bootID": new_uid(f"{cluster}/boot/{n.name}"),
                "kernelVersion": "5.15.0-119-generic",
                "osImage": "Ubuntu 22.04.4 LTS",
                "containerRuntimeVersion": "containerd://1.7.20",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": KUBELET_VERSION,
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def daemonset_object(name: str, ts: float, cluster: str, nodes: int) -> Obj:
    meta = object_meta(name, ts, GPU_NAMESPACE, uid=new_uid(f"{cluster}/ds/{name}"))
    meta["labels"] = {"app": name}
    meta["generation"] = 1
    return {
        "kind": "DaemonSet",
        "apiVersion": "apps/v1",
        "metadata": meta,
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [{"name": name, "image": f"nvcr.io/nvidia/k8s/{name}:latest"}]
                },
            },
        },
        "status": {
            "currentNumberScheduled": nodes,
            "desiredNumberScheduled": nodes,
            "numberMisscheduled": 0,
            "numberReady": nodes,
            "numberAvailable": nodes,
            "observedGeneration": 1,
        },
    }


def pdb_object(
    namespace: str, name: str, selector: dict[str, str], ts: float, max_unavailable: int
) -> Obj:
    return {
        "kind": "PodDisruptionBudget",
        "apiVersion": "policy/v1",
        "metadata": {**object_meta(name, ts, namespace), "generation": 1},
        "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": selector}},
        "status": {
            "observedGeneration": 1,
            "disruptionsAllowed": 0,
            "currentHealthy": 0,
            "desiredHealthy": 0,
            "expectedPods": 0,
        },
    }


def event_object(
    *,
    namespace: str,
    involved: Obj,
    reason: str,
    message: str,
    ts: float,
    type_: str = "Normal",
    component: str = "gpufleet-sim",
    host: str | None = None,
) -> Obj:
    meta = involved["metadata"]
    t = rfc3339(ts)
    name = f"{meta['name']}.{uuidlib.uuid4().hex[:16]}"
    ref = {
        "kind": involved.get("kind", "Pod"),
        "apiVersion": involved.get("apiVersion", "v1"),
        "name": meta["name"],
        "uid": meta.get("uid", ""),
    }
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    source: Obj = {"component": component}
    if host:
        source["host"] = host
    return {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": object_meta(name, ts, namespace),
        "involvedObject": ref,
        "reason": reason,
        "message": message,
        "source": source,
        "firstTimestamp": t,
        "lastTimestamp": t,
        "count": 1,
        "type": type_,
        "reportingComponent": component,
        "reportingInstance": host or "",
    }
