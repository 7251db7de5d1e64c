"""fence_gpu through the decision journal, the executor and the real `kubernetes` client against
the simulator: an XID 48 on one GPU of a DRA node fences that GPU only.

h100-0000 runs `ml/train` (2 ranks x 4 GPUs); every node publishes a `gpu.nvidia.com`
ResourceSlice whose device `uuid`s are the GPUs the simulated exporters report.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from detectors.findings import Finding, FindingKind, Severity
from harness.k8s_sim import (
    Sim,
    annotations_of,
    labels_of,
    meta,
    name_of,
    present,
    running_sim,
    spec,
)
from kube.actuator import KubeActuator
from remediations.capabilities import WriteContext
from remediations.cluster_names import fence_rule_name
from remediations.decision_journal import DecisionJournal
from remediations.executor import Executor
from remediations.policy import Policy, policy_from_dict
from remediations.store import ActionRecord, Store
from remediations.types import (
    ACTION_ANNOTATION,
    INCIDENT_ANNOTATION,
    QUARANTINE_TAINT,
    ActionState,
    Intent,
)
from simulator.layout import gpu_uuid
from tests.remediations.helpers import live_policy

T0 = 1_700_000_000.0
NODE = "h100-0000"
BAD = gpu_uuid("small", NODE, 2)


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(tmp_path, history=5000) as s:
        yield s


@pytest.fixture
def actuator(sim: Sim) -> Iterator[KubeActuator]:
    act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig)
    yield act
    act.close()


def xid48(uuid: str = BAD, node: str = NODE) -> Finding:
    return Finding(
        kind=FindingKind.GPU_XID,
        severity=Severity.CRITICAL,
        summary=f"XID 48 (double bit ECC error) on {node} {uuid}",
        first_seen=T0,
        last_seen=T0,
        node=node,
        gpu_uuid=uuid,
    )


def _rules(**params: object) -> dict[str, object]:
    return {
        "hysteresis": {"open_after": 1},
        "rules": [{"name": "fence", "match": {"kinds": ["gpu_xid"]}, "playbook": "fence_gpu",
                   "mode": "auto", "params": params}],
    }  # fmt: skip


def _run(
    policy: Policy, store: Store, act: KubeActuator, sim: Sim, f: Finding
) -> list[ActionRecord]:
    eng = DecisionJournal(policy, store, started_at=T0 - 60)
    eng.cycle([f], act.cluster_view(T0), T0)
    runner = Executor(policy, store, act, owner="sim-test", open_incidents=eng.open_incident_ids)
    now = T0
    for _ in range(3):
        now += 31
        sim.advance(31)
        runner.run(act.cluster_view(now), now)
    return store.actions()


def _running(sim: Sim) -> dict[str, tuple[int, ...]]:
    return {p.key: p.gpu_indices for p in sim.cluster.running_pods() if p.node == NODE}


def test_xid48_fences_that_gpu_only(sim: Sim, actuator: KubeActuator, store: Store) -> None:
    before = _running(sim)
    (a,) = _run(live_policy(_rules()), store, actuator, sim, xid48())
    assert a.state is ActionState.DONE, a
    (rule,) = client.ResourceV1Api(actuator.dra.api).list_device_taint_rule().items
    assert name_of(rule) == fence_rule_name(BAD)
    sel = present(spec(rule).device_selector, "deviceSelector")
    taint = spec(rule).taint
    assert (sel.driver, sel.pool, sel.device) == ("gpu.nvidia.com", NODE, "gpu-2")
    assert (taint.key, taint.value, taint.effect) == (QUARANTINE_TAINT, "gpu_xid", "NoSchedule")
    ann = annotations_of(rule)
    assert ann[ACTION_ANNOTATION] == a.id and ann[INCIDENT_ANNOTATION] == a.incident_id
    assert labels_of(rule)["app.kubernetes.io/managed-by"] == "gpufleet"
    # one device fenced; the node and its other seven GPUs stay in service
    assert set(sim.cluster.device_taints) == {(NODE, 2)}
    node = actuator.node(NODE)
    assert node is not None and not node.unschedulable and not node.taints
    assert _running(sim) == before  # NoSchedule: running work is left alone
    pinned = a.plan[0]
    assert (pinned.args["pool"], pinned.args["device"]) == (NODE, "gpu-2")


def test_no_execute_evicts_only_the_pod_on_that_gpu(
    sim: Sim, actuator: KubeActuator, store: Store
) -> None:
    before = _running(sim)
    holder = next(k for k, gpus in before.items() if 2 in gpus)
    (a,) = _run(live_policy(_rules(effect="NoExecute")), store, actuator, sim, xid48())
    assert a.state is ActionState.DONE, a
    after = _running(sim)
    assert {k: g for k, g in after.items() if k != holder} == {
        k: g for k, g in before.items() if k != holder
    }
    assert all(2 not in gpus for gpus in after.values())
    node = actuator.node(NODE)
    assert node is not None and not node.unschedulable


def test_shadow_writes_nothing_and_effect_none_only_records(
    sim: Sim, actuator: KubeActuator, store: Store, tmp_path: Path
) -> None:
    before = _running(sim)
    (a,) = _run(policy_from_dict(_rules(), "<shadow>"), store, actuator, sim, xid48())
    assert a.state is ActionState.SHADOW
    assert client.ResourceV1Api(actuator.dra.api).list_device_taint_rule().items == []
    other = Store.open(f"sqlite:///{tmp_path / 'none.db'}", cluster="test-cluster")
    try:
        (b,) = _run(live_policy(_rules(effect="None")), other, actuator, sim, xid48())
    finally:
        other.close()
    assert b.state is ActionState.DONE, b
    (rule,) = client.ResourceV1Api(actuator.dra.api).list_device_taint_rule().items
    assert spec(rule).taint.effect == "None"
    assert sim.cluster.controller.blocked() == set() and _running(sim) == before


def test_unfence_deletes_only_gpufleets_rule(sim: Sim, actuator: KubeActuator) -> None:
    ctx = WriteContext("a1", "i1", "fence_gpu", "test")
    fence = actuator.pin(
        Intent(
            "fence_device",
            NODE,
            {"uuid": BAD, "rule": fence_rule_name(BAD), "key": QUARANTINE_TAINT,
             "value": "gpu_xid", "effect": "NoSchedule"},
        )
    )  # fmt: skip
    assert actuator.apply(fence, ctx).startswith("created")
    assert "already present" in actuator.apply(fence, ctx)  # a retry after a crash
    foreign = fence_rule_name(gpu_uuid("small", NODE, 5))
    body = client.ResourceV1Api(actuator.dra.api).read_device_taint_rule(fence_rule_name(BAD))
    m = meta(body)
    m.name, m.labels, m.resource_version, m.uid = foreign, {}, None, None
    client.ResourceV1Api(actuator.dra.api).create_device_taint_rule(body)
    undo = Intent("unfence_device", NODE, {"rule": foreign})
    assert "not gpufleet's" in actuator.apply(undo, ctx)
    ours = Intent("unfence_device", NODE, {"rule": fence_rule_name(BAD)})
    assert actuator.apply(ours, ctx).startswith("deleted")
    assert "already absent" in actuator.apply(ours, ctx)
    assert [
        name_of(r) for r in client.ResourceV1Api(actuator.dra.api).list_device_taint_rule().items
    ] == [foreign]


def test_a_gpu_no_slice_publishes_cannot_be_fenced(actuator: KubeActuator) -> None:
    from errors import PermanentError

    with pytest.raises(PermanentError, match="not a DRA GPU"):
        actuator.pin(Intent("fence_device", NODE, {"uuid": "GPU-unknown", "rule": "x"}))


def test_a_dry_run_rule_becomes_a_fence(sim: Sim, actuator: KubeActuator) -> None:
    args = {"uuid": BAD, "rule": fence_rule_name(BAD), "key": QUARANTINE_TAINT, "value": "gpu_xid"}
    dry = actuator.pin(Intent("fence_device", NODE, {**args, "effect": "None"}))
    actuator.apply(dry, WriteContext("a1", "i1", "fence_gpu", "dry run"))
    assert not sim.cluster.controller.blocked()
    fence = actuator.pin(Intent("fence_device", NODE, {**args, "effect": "NoSchedule"}))
    did = actuator.apply(fence, WriteContext("a2", "i1", "fence_gpu", "fence"))
    assert did.endswith("effect None -> NoSchedule")
    rule = client.ResourceV1Api(actuator.dra.api).read_device_taint_rule(fence_rule_name(BAD))
    assert spec(rule).taint.effect == "NoSchedule"
    assert annotations_of(rule)[ACTION_ANNOTATION] == "a2"
    assert (NODE, 2) in sim.cluster.controller.blocked()
