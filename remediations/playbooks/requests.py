"""request_reset and request_reboot: ask a node agent or a person; gpufleet has no host access.

The request is an annotation on the node (`gpufleet.io/requested=<what>:<action id>`) plus the
journal entry; whoever acts on it removes the annotation. NVSentinel #1805/#1808: a request is
never "in progress forever" — verification only confirms it was recorded, and the attempt limit
and cooldown gates stop a reset/reboot loop (#1543).
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
from remediations.types import REQUEST_ANNOTATION, Intent


class _Request(Playbook):
    what: str = ""

    def plan(self, subject: Subject, view: ClusterView, params: BaseParams) -> Plan | NoPlan:
        node = node_of(subject, view)
        if isinstance(node, NoPlan):
            return node
        value = f"{self.what}:{subject.gpu_uuid}" if subject.gpu_uuid else self.what
        intent = Intent("annotate", node, {"annotations": {REQUEST_ANNOTATION: value}})
        return Plan(self.name, node_target(node), (intent,), self.disruptive, (node,))

    def verify(
        self, intents: tuple[Intent, ...], reader: ClusterReader, params: BaseParams
    ) -> Verification:
        for i in intents:
            node = reader.node(i.target)
            if node is None:
                return Verification(VerifyStatus.FAILED, f"node {i.target} is gone")
            if REQUEST_ANNOTATION not in node.annotations:
                return Verification(VerifyStatus.PENDING, "request not yet on the node")
        return Verification(VerifyStatus.OK, "request recorded on the node")


class RequestReset(_Request):
    name = "request_reset"
    what = "reset"


class RequestReboot(_Request):
    name = "request_reboot"
    what = "reboot"
    disruptive = True
