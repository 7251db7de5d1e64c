"""Pod bodies and pod lifecycle as a kubelet and the controllers would write them.

Workload pods carry the owner references their operators set (PyTorchJob, Job, ReplicaSet), GPU
limits and an emptyDir, so kubectl drain needs `--delete-emptydir-data` for them as for real
training pods; DaemonSet pods are owned by a DaemonSet, so drain needs `--ignore-daemonsets`.
Status setters move a pod through Pending -> scheduled -> Running (Ready) -> Succeeded.
"""

from __future__ import annotations

import zlib
from typing import Any

from simulator.kube_api.objects import GPU, GPU_NAMESPACE, new_uid, object_meta, rfc3339
from simulator.layout import POOL_LABEL, SimPod
from simulator.scenario import WorkloadKind

Obj = dict[str, Any]
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


def pod_ip(namespace: str, name: str, start: float) -> str:
    """A pod IP that changes when the pod is recreated (the same formula as kube-state-metrics)."""
    h = zlib.crc32(f"{namespace}/{name}/{start}".encode())
    return f"10.{128 + (h >> 16) % 64}.{(h >> 8) % 256}.{max(2, h % 254)}"


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
    meta = object_meta(p.name, ts, p.namespace)
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


def daemon_pod(ds: Obj, node: str, ts: float) -> Obj:
    ds_name = ds["metadata"]["name"]
    meta = object_meta(f"{ds_name}-{node}", ts, GPU_NAMESPACE)
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


def gpu_count(pod: Obj) -> int:
    total = 0
    for c in pod.get("spec", {}).get("containers", []):
        total += int((c.get("resources", {}).get("limits") or {}).get(GPU, 0))
    return total
