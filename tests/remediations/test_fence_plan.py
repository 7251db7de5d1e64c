"""fence_gpu / unfence_gpu planning, verification and rollback (pure: no cluster)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import pytest

from errors import ConfigError
from remediations.cluster_names import fence_rule_name
from remediations.cluster_view import ClusterView, NodeView, PodView
from remediations.playbooks import PLAYBOOKS, NoPlan, Plan, Subject, VerifyStatus
from remediations.playbooks.fence import FenceParams
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


def test_without_device_taints_the_plan_is_the_pods_on_gpu_grain() -> None:
    """A cluster that serves no DeviceTaintRules (1.34-1.36 without the gate): the grain's guard,
    counted as disruptive; NoExecute also evicts the GPU's pod; a dry run plans nothing."""
    pb = PLAYBOOKS["fence_gpu"]
    pod = PodView("ml", "train-0", "n1", "u0", "Running", {}, "Job", "train")
    view = ClusterView(
        {"n1": NODE}, {pod.key: pod}, {}, pod_of_gpu={UUID: pod.key}, device_taints=False
    )
    keep = pb.plan(subject(), view, pb.params({"effect": "NoSchedule"}))
    assert isinstance(keep, Plan) and keep.playbook == "fence_gpu" and keep.disruptive
    (guard,) = keep.intents
    assert guard.op == "cordon_unless_withdrawn" and guard.args["gpu"] == UUID
    assert "single-GPU fencing needs a cluster that serves DeviceTaintRules" in str(
        guard.args["fallback"]
    )
    evict = pb.plan(subject(), view, pb.params({"effect": "NoExecute"}))
    assert isinstance(evict, Plan) and [i.op for i in evict.intents] == [
        "cordon_unless_withdrawn",
        "evict_pods",
    ]
    assert evict.intents[1].args["only"] == [pod.key] and evict.namespaces == ("ml",)
    dry = pb.plan(subject(), view, pb.params({"effect": "None"}))
    assert isinstance(dry, NoPlan) and "records nothing" in dry.reason
    served = pb.plan(subject(), replace(view, device_taints=True), pb.params({}))
    assert isinstance(served, Plan) and [i.op for i in served.intents] == ["fence_device"]
