"""fence_gpu / unfence_gpu planning, verification and rollback (pure: no cluster)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from errors import ConfigError
from remediations.cluster_view import ClusterView, NodeView, PodView
from remediations.playbooks import PLAYBOOKS, NoPlan, Plan, Subject, VerifyStatus
from remediations.playbooks.fence import FenceParams, fence_rule_name
from remediations.policy import policy_from_dict
from remediations.types import IncidentId, Intent

UUID = "GPU-8c1f6a0e-0000-4000-8000-000000000002"
NODE = NodeView("n1", {}, {}, (), False, 8, True)
VIEW = ClusterView({"n1": NODE}, {}, {})


def subject(gpu: str | None = UUID, node: str | None = "n1") -> Subject:
    return Subject(IncidentId("i1"), "gpu_xid", "critical", "XID 48", node=node, gpu_uuid=gpu)


@dataclass(frozen=True)
class Rule:
    effect: str
    key: str = "gpufleet.io/quarantine"
    ours: bool = True
    device: str | None = "gpu-2"


class Reader:
    def __init__(self, rules: dict[str, Rule]) -> None:
        self.rules = rules

    def node(self, name: str) -> NodeView | None:
        return NODE

    def pods_on_node(self, name: str) -> Sequence[PodView]:
        return ()

    def pods_selected(self, namespace: str, selector: str) -> Sequence[PodView]:
        return ()

    def pod(self, namespace: str, name: str) -> PodView | None:
        return None

    def device_taint_rule(self, name: str) -> Rule | None:
        return self.rules.get(name)


def test_plan_fences_one_gpu_and_keeps_the_node_available() -> None:
    pb = PLAYBOOKS["fence_gpu"]
    plan = pb.plan(subject(), VIEW, pb.params({"effect": "NoExecute"}))
    assert isinstance(plan, Plan)
    assert plan.target == f"gpu/{UUID}" and not plan.disruptive
    (i,) = plan.intents
    assert (i.op, i.target) == ("fence_device", "n1")
    assert i.args["rule"] == fence_rule_name(UUID) == "gpufleet-" + UUID.lower()
    assert (i.args["effect"], i.args["driver"]) == ("NoExecute", "gpu.nvidia.com")
    assert pb.rollback(plan.intents) == (
        Intent("unfence_device", "n1", {"rule": fence_rule_name(UUID)}),
    )


def test_no_gpu_or_unknown_node_is_no_plan() -> None:
    pb = PLAYBOOKS["fence_gpu"]
    assert isinstance(pb.plan(subject(gpu=None), VIEW, FenceParams()), NoPlan)
    assert isinstance(pb.plan(subject(node="gone"), VIEW, FenceParams()), NoPlan)


def test_verify_reads_the_rule_back() -> None:
    pb = PLAYBOOKS["fence_gpu"]
    plan = pb.plan(subject(), VIEW, FenceParams())
    assert isinstance(plan, Plan)
    pinned = (Intent("fence_device", "n1", {**plan.intents[0].args, "device": "gpu-2"}),)
    name = fence_rule_name(UUID)
    cases = {
        VerifyStatus.OK: {name: Rule("NoSchedule")},
        VerifyStatus.PENDING: {},
    }
    for want, rules in cases.items():
        assert pb.verify(pinned, Reader(rules), FenceParams()).status is want
    for bad in (Rule("None"), Rule("NoSchedule", ours=False), Rule("NoSchedule", device="gpu-3")):
        v = pb.verify(pinned, Reader({name: bad}), FenceParams())
        assert v.status is VerifyStatus.FAILED, bad
    undo = PLAYBOOKS["unfence_gpu"]
    back = undo.plan(subject(), VIEW, FenceParams())
    assert isinstance(back, Plan) and back.undo
    assert undo.verify(back.intents, Reader({}), FenceParams()).status is VerifyStatus.OK
    still = Reader({name: Rule("NoSchedule")})
    assert undo.verify(back.intents, still, FenceParams()).status is VerifyStatus.PENDING


def test_policy_rejects_an_unknown_effect_naming_the_field() -> None:
    rule = {"name": "f", "match": {"kinds": ["gpu_xid"]}, "playbook": "fence_gpu",
            "mode": "auto", "params": {"effect": "PreferNoSchedule"}}  # fmt: skip
    with pytest.raises(ConfigError, match=r"rules\[0\]\.params\.effect"):
        policy_from_dict({"rules": [rule]}, "p.yaml")
