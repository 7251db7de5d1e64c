"""An in-memory cluster that speaks the actuator contract, for the engine's logic tests.

The Kubernetes-facing tests use the real `kubernetes` client against the simulator's API; this
fake lets hypothesis run thousands of engine cycles. It records every effective write so tests can
check that nothing happened twice.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from errors import PermanentError
from remediations.capabilities import WriteContext
from remediations.cluster_view import ClusterView, JobView, NodeView, PodView
from remediations.types import OWNER_ANNOTATION, Intent

_uids = itertools.count(1)


@dataclass
class FNode:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    taints: list[tuple[str, str, str]] = field(default_factory=list)
    unschedulable: bool = False
    gpus: int = 8


@dataclass
class FPod:
    namespace: str
    name: str
    node: str | None
    uid: str
    owner_kind: str | None = "ReplicaSet"
    job: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    priority_class: str | None = None


class FakeCluster:
    def __init__(self, pools: dict[str, int], cpu_nodes: int = 0) -> None:
        self.nodes: dict[str, FNode] = {}
        for pool, n in pools.items():
            for i in range(n):
                name = f"{pool}-{i:04d}"
                self.nodes[name] = FNode(name, {"gpufleet.io/pool": pool})
        for i in range(cpu_nodes):
            self.nodes[f"cpu-{i}"] = FNode(f"cpu-{i}", {"gpufleet.io/pool": "cpu"}, gpus=0)
        self.pods: dict[str, FPod] = {}
        self.writes: list[tuple[str, str, str]] = []
        self.fail_ops: set[str] = set()

    def add_pod(self, ns: str, name: str, node: str, **kw: Any) -> FPod:
        p = FPod(ns, name, node, f"uid-{next(_uids)}", **kw)
        self.pods[f"{ns}/{name}"] = p
        return p

    # ---- views ---------------------------------------------------------------------------------

    def _node(self, n: FNode) -> NodeView:
        return NodeView(
            n.name, dict(n.labels), dict(n.annotations), tuple(n.taints), n.unschedulable, n.gpus
        )

    def _pod(self, p: FPod) -> PodView:
        return PodView(
            p.namespace,
            p.name,
            p.node,
            p.uid,
            "Running",
            dict(p.labels),
            p.owner_kind,
            None,
            p.priority_class,
            job=p.job,
        )

    def view(self, now: float = 0.0) -> ClusterView:
        pods = {k: self._pod(p) for k, p in self.pods.items()}
        jobs: dict[str, list[str]] = {}
        for k, p in self.pods.items():
            if p.job:
                jobs.setdefault(p.job, []).append(k)
        return ClusterView(
            {n: self._node(v) for n, v in self.nodes.items()},
            pods,
            {j: JobView(j, "job", tuple(ks)) for j, ks in jobs.items()},
            {},
            now,
        )

    def node(self, name: str) -> NodeView | None:
        n = self.nodes.get(name)
        return self._node(n) if n else None

    def pods_on_node(self, name: str) -> Sequence[PodView]:
        return [self._pod(p) for p in self.pods.values() if p.node == name]

    def pods_selected(self, namespace: str, selector: str) -> Sequence[PodView]:
        _k, v = selector.split("=", 1)
        return [
            self._pod(p)
            for p in self.pods.values()
            if p.namespace == namespace and (p.job or "").split("/")[-1] == v
        ]

    def pod(self, namespace: str, name: str) -> PodView | None:
        p = self.pods.get(f"{namespace}/{name}")
        return self._pod(p) if p else None

    def unavailable_gpu_nodes(self) -> set[str]:
        return {n.name for n in self.nodes.values() if n.unschedulable and n.gpus}

    # ---- actuator ------------------------------------------------------------------------------

    def pin(self, intent: Intent) -> Intent:
        a = dict(intent.args)
        if intent.op == "delete_pod":
            p = self.pods.get(intent.target)
            a["uid"] = p.uid if p else None
        elif intent.op == "evict_pods":
            a["pods"] = [
                [p.namespace, p.name, p.uid]
                for p in self.pods.values()
                if p.node == intent.target
                and p.owner_kind not in (None, "DaemonSet")
                and (not a.get("job") or p.job == a["job"])
            ]
        return Intent(intent.op, intent.target, a)

    def _recreate(self, p: FPod) -> None:
        del self.pods[f"{p.namespace}/{p.name}"]
        if p.owner_kind is None:
            return
        home = next(
            (
                n.name
                for n in self.nodes.values()
                if not n.unschedulable and n.gpus and n.name != p.node
            ),
            None,
        )
        self.add_pod(
            p.namespace, p.name, home or "", owner_kind=p.owner_kind, job=p.job, labels=p.labels
        )

    def apply(self, intent: Intent, ctx: WriteContext) -> str:
        if intent.op in self.fail_ops:
            raise PermanentError(f"injected failure of {intent.op}")
        n = self.nodes.get(intent.target)
        op, a = intent.op, intent.args
        if op == "cordon" and n is not None:
            if n.unschedulable:
                return "already unschedulable"
            n.unschedulable = True
            n.annotations[OWNER_ANNOTATION] = ctx.actor
            self.writes.append((op, n.name, ctx.action_id))
        elif op == "uncordon" and n is not None:
            if a.get("only_if_ours") and OWNER_ANNOTATION not in n.annotations:
                return "not ours"
            if n.unschedulable:
                n.unschedulable = False
                n.annotations.pop(OWNER_ANNOTATION, None)
                self.writes.append((op, n.name, ctx.action_id))
        elif op == "taint" and n is not None:
            t = (a["key"], a["value"], a["effect"])
            if t not in n.taints:
                n.taints.append(t)
        elif op == "untaint" and n is not None:
            n.taints = [t for t in n.taints if t[0] != a["key"]]
        elif op == "label" and n is not None:
            n.labels.update(a["labels"])
        elif op == "unlabel" and n is not None:
            for k in a["keys"]:
                n.labels.pop(k, None)
        elif op == "annotate" and n is not None:
            n.annotations.update(a["annotations"])
        elif op == "evict_pods":
            for ns, name, uid in a["pods"]:
                p = self.pods.get(f"{ns}/{name}")
                if p is not None and p.uid == uid:
                    self.writes.append(("evict", f"{ns}/{name}", uid))
                    self._recreate(p)
        elif op == "delete_pod":
            p = self.pods.get(intent.target)
            if p is not None and p.uid == a.get("uid"):
                self.writes.append(("delete", intent.target, p.uid))
                self._recreate(p)
        return "ok"
