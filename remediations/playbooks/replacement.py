"""mark_replacement: label what gpufleet already holds as waiting for new hardware.

A failed diagnostic (or a lemon, `remediations.repeats`) earns a replacement mark:
`gpufleet.io/hardware-replacement` on the quarantined node, or on gpufleet's DeviceTaintRule of a
fenced GPU (`diagnose_and_return` builds the intents). The mark takes nothing more out of
service, so it is its own playbook: the gates that pace new disruptions (attempts, cooldown,
rate) never hold it up behind the quarantine or fence it follows (`gates.MARKS`). No policy rule
plans it; it follows a diagnostic's verdict only.
"""

from __future__ import annotations

from remediations.capabilities import ClusterReader
from remediations.cluster_view import ClusterView
from remediations.playbooks.base import BaseParams, NoPlan, Plan, Playbook, Subject, Verification
from remediations.playbooks.fence import FenceGpu
from remediations.playbooks.node_state import node_verify
from remediations.types import Intent

NAME = "mark_replacement"


class MarkReplacement(Playbook):
    name = NAME
    disruptive = False

    def plan(self, subject: Subject, view: ClusterView, params: BaseParams) -> Plan | NoPlan:
        return NoPlan("a replacement mark follows a failed diagnostic (diagnose_and_return)")

    def verify(
        self, intents: tuple[Intent, ...], reader: ClusterReader, params: BaseParams
    ) -> Verification:
        on_rules = tuple(i for i in intents if i.op == "label_device_rule")
        if on_rules:
            return FenceGpu().verify(on_rules, reader, params)
        return node_verify(intents, reader)
