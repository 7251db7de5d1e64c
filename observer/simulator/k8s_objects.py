"""JSON bodies of the Kubernetes objects a simulated GPU fleet consists of.

Nodes, workload pods, the GPU operator's DaemonSet pods, PodDisruptionBudgets and Events, shaped
like a real API server returns them (field names, required fields, RFC 3339 times), so that the
real `kubernetes` client deserialises them and kubectl's drain filters treat them as on a real
cluster (DaemonSet-owned pods skipped, controller-owned pods evicted).
"""

from __future__ import annotations

import uuid as uuidlib
import zlib
from datetime import UTC, datetime
from typing import Any

from observer.simulator.layout import POOL_LABEL, SimNode, SimPod
from observer.simulator.scenario import WorkloadKind

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
GPU_NAMESPACE = "gpu-operator"
DAEMONSETS = ("nvidia-dcgm-exporter", "nvidia-device-plugin-daemonset")
KUBELET_VERSION = "v1.31.4"
CONTAINER = {
    WorkloadKind.TRAINING: "pytorch",
    WorkloadKind.INFERENCE: "server",
    WorkloadKind.IDLE: "notebook",
}
"""Container names, as the exporters' `container` label has them."""
OWNER_API = {
    "PyTorchJob": "kubeflow.org/v1",
    "Job": "batch/v1",
    "ReplicaSet": "apps/v1",
    "DaemonSet": "apps/v1",
}


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_uid(seed: str | None = None) -> str:
    if seed is not None:
        return str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"gpufleet-sim:{seed}"))
    return str(uuidlib.uuid4())


def _meta(name: str, ts: float, namespace: str | None = None, uid: str | None = None) -> Obj:
    meta: Obj = {"name": name, "uid": uid or new_uid(), "creationTimestamp": rfc3339(ts)}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def node_ip(position: int) -> str:
    """The node's InternalIP (the same formula as the kube-state-metrics side)."""
    return f"10.0.{position // 250}.{position % 250 + 2}"


def pod_ip(namespace: str, name: str, start: float) -> str:
    """A pod IP that changes when the pod is recreated (the same formula as kube-state-metrics)."""
    h = zlib.crc32(f"{namespace}/{name}/{start}".encode())
    return f"10.{128 + (h >> 16) % 64}.{(h >> 8) % 256}.{max(2, h % 254)}"


def node_object(n: SimNode, index: int, ts: float, cluster: str) -> Obj:
    cond_time = rfc3339(ts)
    conditions = [
        ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID"),
        ("Ready", "True", "KubeletReady"),
    ]
    resources = {
        "cpu": "192",
        "memory": "2113531604Ki",
        "ephemeral-storage": "3750000000Ki",
        "pods": "110",
        GPU: str(n.gpus),
    }
    meta = _meta(n.name, ts, uid=new_uid(f"{cluster}/node/{n.name}"))
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
            "allocatable": {**resources, "cpu": "190", "memory": "2100000000Ki"},
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


def owner_ref(kind: str, name: str, uid: str) -> Obj:
    return {
        "apiVersion": OWNER_API.get(kind, "v1"),
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def workload_pod(p: SimPod, *, ts: float, owner_uid: str, pool: str | None, grace: int = 30) -> Obj:
    """A pod of a workload, not yet scheduled (no nodeName, phase Pending)."""
    meta = _meta(p.name, ts, p.namespace)
    meta["labels"] = dict(p.labels)
    meta["ownerReferences"] = [owner_ref(p.owner_kind, p.owner_name, owner_uid)]
    container = {
        "name": CONTAINER.get(p.kind, "main"),
        "image": "nvcr.io/nvidia/pytorch:24.07-py3",
        "resources": {
            "limits": {GPU: str(len(p.gpu_indices))},
            "requests": {GPU: str(len(p.gpu_indices))},
        },
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    spec: Obj = {
        "containers": [container],
        "restartPolicy": "Never" if p.kind == WorkloadKind.TRAINING else "Always",
        "terminationGracePeriodSeconds": grace,
        "schedulerName": "default-scheduler",
        "tolerations": [
            {"key": GPU, "operator": "Exists", "effect": "NoSchedule"},
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    }
    if pool:
        spec["nodeSelector"] = {POOL_LABEL: pool}
    if p.priority_class:
        spec["priorityClassName"] = p.priority_class
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }


def daemonset_object(name: str, ts: float, cluster: str, nodes: int) -> Obj:
    meta = _meta(name, ts, GPU_NAMESPACE, uid=new_uid(f"{cluster}/ds/{name}"))
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


def daemon_pod(ds: Obj, node: str, ts: float) -> Obj:
    ds_name = ds["metadata"]["name"]
    meta = _meta(f"{ds_name}-{node}", ts, GPU_NAMESPACE)
    meta["labels"] = {"app": ds_name, "controller-revision-hash": "sim"}
    meta["ownerReferences"] = [owner_ref("DaemonSet", ds_name, ds["metadata"]["uid"])]
    pod = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "containers": [{"name": ds_name, "image": f"nvcr.io/nvidia/k8s/{ds_name}:latest"}],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "priorityClassName": "system-node-critical",
            "tolerations": [{"operator": "Exists"}],
        },
        "status": {},
    }
    set_running(pod, ts, host_ip="")
    return pod


def set_running(pod: Obj, ts: float, host_ip: str, pod_ip: str | None = None) -> None:
    t = rfc3339(ts)
    names = [c["name"] for c in pod["spec"]["containers"]]
    pod["status"] = {
        "phase": "Running",
        "qosClass": pod["status"].get("qosClass", "BestEffort"),
        "hostIP": host_ip,
        "podIP": pod_ip or host_ip,
        "startTime": t,
        "conditions": [
            {"type": c, "status": "True", "lastTransitionTime": t}
            for c in (
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled",
            )
        ],
        "containerStatuses": [
            {
                "name": n,
                "ready": True,
                "restartCount": 0,
                "started": True,
                "image": "sim",
                "imageID": "sim",
                "containerID": f"containerd://{new_uid().replace('-', '')}",
                "state": {"running": {"startedAt": t}},
                "lastState": {},
            }
            for n in names
        ],
    }


def set_scheduled(pod: Obj, node: str, ts: float) -> None:
    pod["spec"]["nodeName"] = node
    pod["status"] = {
        "phase": "Pending",
        "qosClass": "BestEffort",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(ts)}
        ],
    }


def set_unschedulable(pod: Obj, ts: float, message: str) -> None:
    pod["status"] = {
        "phase": "Pending",
        "qosClass": "BestEffort",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": rfc3339(ts),
            }
        ],
    }


def set_finished(pod: Obj, ts: float) -> None:
    t = rfc3339(ts)
    pod["status"]["phase"] = "Succeeded"
    pod["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": t}
    ]
    for cs in pod["status"].get("containerStatuses", []):
        cs["ready"] = False
        cs["state"] = {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": t}}


def pdb_object(
    namespace: str, name: str, selector: dict[str, str], ts: float, max_unavailable: int
) -> Obj:
    return {
        "kind": "PodDisruptionBudget",
        "apiVersion": "policy/v1",
        "metadata": {**_meta(name, ts, namespace), "generation": 1},
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
        "metadata": _meta(name, ts, namespace),
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


def gpu_count(pod: Obj) -> int:
    total = 0
    for c in pod.get("spec", {}).get("containers", []):
        total += int((c.get("resources", {}).get("limits") or {}).get(GPU, 0))
    return total
