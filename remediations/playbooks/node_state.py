"""cordon, uncordon and quarantine: keep new work off a node (and undo only what we did).

Quarantine is cordon + taint `gpufleet.io/quarantine=<kind>:NoSchedule` + label + reason and
incident annotations, so the node's state says why and who from `kubectl describe node`.
"""

from __future__ import annotations

from remediations.capabilities import ClusterReader
from remediations.cluster_view import ClusterView
from remediations.playbooks.base import (
    BaseParams,
    NoPlan,
    Plan,
    Playbook,
    Subject,
    Verification,
    VerifyStatus,
    node_of,
    node_target,
)
from remediations.types import QUARANTINE_LABEL, QUARANTINE_TAINT, Intent


def node_verify(intents: tuple[Intent, ...], reader: ClusterReader) -> Verification:
    """Check every node-state intent of the plan against the live node."""
    for i in intents:
        node = reader.node(i.target)
        if node is None:
            return Verification(VerifyStatus.FAILED, f"node {i.target} is gone")
        if i.op == "cordon" and not node.unschedulable:
            return Verification(VerifyStatus.PENDING, f"{i.target} not yet unschedulable")
        if i.op == "uncordon" and node.unschedulable:
            return Verification(VerifyStatus.PENDING, f"{i.target} still unschedulable")
        if i.op == "taint":
            want = (str(i.args["key"]), str(i.args["value"]), str(i.args["effect"]))
            if want not in node.taints:
                return Verification(VerifyStatus.PENDING, f"{i.target} lacks taint {want[0]}")
        if i.op == "label":
            for k, v in dict(i.args["labels"]).items():
                if node.labels.get(k) != v:
                    return Verification(VerifyStatus.PENDING, f"{i.target} lacks label {k}")
    return Verification(VerifyStatus.OK, "node state as planned")


class Cordon(Playbook):
    name = "cordon"
    disruptive = True

    def plan(self, subject: Subject, view: ClusterView, params: BaseParams) -> Plan | NoPlan:
        node = node_of(subject, view)
        if isinstance(node, NoPlan):
            return node
        return Plan(self.name, node_target(node), (Intent("cordon", node),), True, (node,))

    def verify(
        self, intents: tuple[Intent, ...], reader: ClusterReader, params: BaseParams
    ) -> Verification:
        return node_verify(intents, reader)

    def rollback(self, intents: tuple[Intent, ...]) -> tuple[Intent, ...]:
        return tuple(
            Intent("uncordon", i.target, {"only_if_ours": True})
            for i in intents
            if i.op == "cordon"
        )


class Uncordon(Playbook):
    name = "uncordon"

    def plan(self, subject: Subject, view: ClusterView, params: BaseParams) -> Plan | NoPlan:
        node = node_of(subject, view)
        if isinstance(node, NoPlan):
            return node
        nv = view.nodes[node]
        return Plan(
            self.name,
            node_target(node),
            (Intent("uncordon", node, {"only_if_ours": True}),),
            False,
            (node,),
            undo=True,
            owned=nv.cordoned_by_us,
        )

    def verify(
        self, intents: tuple[Intent, ...], reader: ClusterReader, params: BaseParams
    ) -> Verification:
        return node_verify(intents, reader)


class Quarantine(Playbook):
    name = "quarantine"
    disruptive = True

    def plan(self, subject: Subject, view: ClusterView, params: BaseParams) -> Plan | NoPlan:
        node = node_of(subject, view)
        if isinstance(node, NoPlan):
            return node
        kind = subject.kind
        intents = (
            Intent("cordon", node),
            Intent("taint", node, {"key": QUARANTINE_TAINT, "value": kind, "effect": "NoSchedule"}),
            Intent("label", node, {"labels": {QUARANTINE_LABEL: kind}}),
        )
        return Plan(self.name, node_target(node), intents, True, (node,))

    def verify(
        self, intents: tuple[Intent, ...], reader: ClusterReader, params: BaseParams
    ) -> Verification:
        return node_verify(intents, reader)

    def rollback(self, intents: tuple[Intent, ...]) -> tuple[Intent, ...]:
        out: list[Intent] = []
        for i in reversed(intents):
            if i.op == "label":
                out.append(Intent("unlabel", i.target, {"keys": sorted(i.args["labels"])}))
            elif i.op == "taint":
                out.append(Intent("untaint", i.target, {"key": i.args["key"]}))
            elif i.op == "cordon":
                out.append(Intent("uncordon", i.target, {"only_if_ours": True}))
        return tuple(out)
