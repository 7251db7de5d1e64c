"""restart_pod and restart_job: delete pods so their controller recreates them.

A hung NCCL job needs every rank restarted together; one pod needs only itself. Deletes carry the
pod's UID as a precondition (pinned and journaled before the write), so a resumed engine never
deletes the replacement of a pod it already restarted: exactly once, even for StatefulSet names.
"""

from __future__ import annotations

from remediations.capabilities import ClusterReader
from remediations.cluster_view import ClusterView, PodView
from remediations.playbooks.base import (
    BaseParams,
    NoPlan,
    Plan,
    Playbook,
    Subject,
    Verification,
    VerifyStatus,
)
from remediations.types import Intent


def _pod_of(subject: Subject, view: ClusterView) -> PodView | NoPlan:
    if subject.gpu_uuid is not None and subject.gpu_uuid in view.pod_of_gpu:
        return view.pods[view.pod_of_gpu[subject.gpu_uuid]]
    if subject.job is not None and subject.node is not None:
        for p in view.pods_on(subject.node):
            if p.job == subject.job:
                return p
    return NoPlan("no pod is using the incident's GPU")


class RestartPod(Playbook):
    name = "restart_pod"

    def plan(self, subject: Subject, view: ClusterView, params: BaseParams) -> Plan | NoPlan:
        pod = _pod_of(subject, view)
        if isinstance(pod, NoPlan):
            return pod
        if pod.owner_kind is None:
            return NoPlan(f"pod {pod.key} has no controller to recreate it")
        intent = Intent("delete_pod", pod.key, {"uid": pod.uid})
        return Plan(
            self.name,
            f"pod/{pod.key}",
            (intent,),
            False,
            (),
            namespaces=(pod.namespace,),
            priority_classes=(pod.priority_class,) if pod.priority_class else (),
        )

    def verify(
        self, intents: tuple[Intent, ...], reader: ClusterReader, params: BaseParams
    ) -> Verification:
        for i in intents:
            ns, name = i.target.split("/", 1)
            now = reader.pod(ns, name)
            if now is not None and (now.uid == i.args.get("uid") or i.args.get("uid") is None):
                return Verification(VerifyStatus.PENDING, f"{i.target} not yet replaced")
        return Verification(VerifyStatus.OK, "pod deleted or replaced")


class RestartJob(Playbook):
    name = "restart_job"

    def plan(self, subject: Subject, view: ClusterView, params: BaseParams) -> Plan | NoPlan:
        if subject.job is None or subject.job not in view.jobs:
            return NoPlan("incident names no known job")
        job = view.jobs[subject.job]
        pods = [view.pods[k] for k in job.pods if k in view.pods]
        if not pods:
            return NoPlan(f"job {job.key} has no pods")
        if any(p.owner_kind is None for p in pods):
            return NoPlan(f"job {job.key} has pods without a controller")
        intent = Intent(
            "delete_pods",
            job.namespace,
            {
                "names": [p.name for p in pods],
                "uids": [p.uid for p in pods],
                "selector": f"{job.label}={job.name}",
            },
        )
        return Plan(
            self.name,
            f"job/{job.key}",
            (intent,),
            False,
            (),
            namespaces=(job.namespace,),
            priority_classes=tuple(sorted({p.priority_class for p in pods if p.priority_class})),
        )

    def verify(
        self, intents: tuple[Intent, ...], reader: ClusterReader, params: BaseParams
    ) -> Verification:
        for i in intents:
            old = {u for u in i.args.get("uids") or () if u}
            pods = reader.pods_selected(i.target, str(i.args["selector"]))
            if any(p.uid in old for p in pods):
                return Verification(VerifyStatus.PENDING, "old ranks still present")
            if len(pods) < len(i.args["names"]):
                return Verification(
                    VerifyStatus.PENDING, f"{len(pods)}/{len(i.args['names'])} ranks back"
                )
            if any(p.phase != "Running" for p in pods):
                return Verification(VerifyStatus.PENDING, "ranks not yet running")
        return Verification(VerifyStatus.OK, "every rank restarted and running")
