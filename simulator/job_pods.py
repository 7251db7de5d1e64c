"""The pod a simulated Job runs, as the real Job controller and kubelet leave it.

A real cluster reports why a Job's container failed only in its pod: the Job's `Failed` condition
says "Job has reached the specified backoff limit", and the container's own words (what
nvidia-smi or dcgmi printed, by `terminationMessagePolicy: FallbackToLogsOnError` its last log
lines) are in `status.containerStatuses[].state.terminated.message`. A client that wants the
reason must read the pod, found by the `batch.kubernetes.io/job-name` label, so the simulator
keeps the reason there too. The pod is owned by its Job and goes with it.
"""

from __future__ import annotations

import copy
import zlib
from typing import Any

from simulator.kube_api.objects import new_uid
from simulator.node_lifecycle import add_default_tolerations

Obj = dict[str, Any]
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
BACKOFF_LIMIT_REACHED = "Job has reached the specified backoff limit"
_CHARS = "bcdfghjklmnpqrstvwxz2456789"


def pod_name(job: Obj) -> str:
    """`<job>-<5 characters>` as the Job controller's generateName, stable per Job uid."""
    seed = zlib.crc32(str(job["metadata"].get("uid", job["metadata"]["name"])).encode())
    suffix = "".join(_CHARS[(seed >> (5 * i)) % len(_CHARS)] for i in range(5))
    return f"{job['metadata']['name'][:57]}-{suffix}"


def job_pod(job: Obj, at: str) -> Obj:
    """The Job's pod, Running on the template's node (a pod pinned by `nodeName` skips the
    scheduler)."""
    meta, template = job["metadata"], copy.deepcopy(job["spec"]["template"])
    uid, name = str(meta.get("uid", "")), str(meta["name"])
    labels = {
        **(template.get("metadata") or {}).get("labels", {}),
        "batch.kubernetes.io/controller-uid": uid,
        JOB_NAME_LABEL: name[:63],
        "controller-uid": uid,
        "job-name": name[:63],
    }
    pod: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(job),
            "namespace": meta.get("namespace", "default"),
            # every pod has a uid (what a reboot's pod deletion and the controllers key on)
            "uid": new_uid(f"pod/{meta.get('namespace', 'default')}/{pod_name(job)}/{uid}"),
            "labels": labels,
            "ownerReferences": [_owner(name, uid)],
        },
        "spec": template.get("spec") or {},
    }
    add_default_tolerations(pod)
    containers = pod["spec"].get("containers") or [{}]
    pod["status"] = {
        "phase": "Running",
        "startTime": at,
        "containerStatuses": [_running(c, at) for c in containers],
    }
    return pod


def _owner(name: str, uid: str) -> Obj:
    return {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid,
            "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def _running(c: Obj, at: str) -> Obj:
    name, image = str(c.get("name", "main")), str(c.get("image", ""))
    digest = f"{zlib.crc32(image.encode()):08x}" * 8
    return {"name": name, "image": image, "imageID": f"{image}@sha256:{digest}",
            "containerID": f"containerd://{zlib.crc32((name + at).encode()):08x}",
            "ready": True, "restartCount": 0, "started": True,
            "state": {"running": {"startedAt": at}}}  # fmt: skip


def terminated(pod: Obj, passed: bool, message: str, at: str) -> Obj:
    """The pod once its container exited: Succeeded (exit 0) or Failed (exit 1) with the
    container's termination message."""
    done = copy.deepcopy(pod)
    done["status"]["phase"] = "Succeeded" if passed else "Failed"
    for c in done["status"].get("containerStatuses") or ():
        started = (c.get("state") or {}).get("running", {}).get("startedAt", at)
        state: Obj = {
            "exitCode": 0 if passed else 1,
            "reason": "Completed" if passed else "Error",
            "startedAt": started,
            "finishedAt": at,
        }
        if message:
            state["message"] = message
        c.update(ready=False, started=False, state={"terminated": state})
    return done
