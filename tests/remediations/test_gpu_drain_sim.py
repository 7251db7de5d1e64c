"""evict_gpu_pods through the decision journal, the executor and the real `kubernetes` client
against a simulated device-plugin cluster (no DRA): an XID 48 on one GPU of h100-0001 evicts
only the pod holding that GPU; `serving/serve-1` and the node's free GPUs stay in service.

h100-0001 runs `serving/serve-0` (GPUs 0-1) and `serving/serve-1` (GPUs 2-3); GPUs 4-7 are free.
The pod-to-GPU mapping comes from the node's simulated dcgm-exporter page (its `UUID`, `pod`
and `namespace` labels), as the collectors build it. With the scenario's XID 48 the simulated
device plugin marks GPU 1 Unhealthy (allocatable 7 of 8); without it, it never does (health
checks off, DP_DISABLE_HEALTHCHECKS).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from detectors.findings import Finding, FindingKind, Severity
from harness.k8s_sim import Sim, exporter_gpus, running_sim
from kube.actuator import KubeActuator
from remediations.cluster_rules import keep_schedulable
from remediations.cluster_view import ClusterView, NodeView
from remediations.decision_journal import DecisionJournal
from remediations.executor import Executor
from remediations.playbooks import PLAYBOOKS, NoPlan, Subject
from remediations.policy import Policy, policy_from_dict
from remediations.store import ActionRecord, Store
from remediations.types import ActionState, IncidentId
from simulator.layout import gpu_uuid
from tests.remediations.helpers import live_policy

NODE = "h100-0001"
BAD = gpu_uuid("small", NODE, 1)
XID48 = {"kind": "xid48_dbe", "node": NODE, "gpu": 1, "start": "0s"}
WRITES = ("create", "update", "patch", "delete")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(f"sqlite:///{tmp_path / 'journal.db'}", cluster="test-cluster")
    yield s
    s.close()


def _finding(t0: float, kind: FindingKind = FindingKind.GPU_XID) -> Finding:
    return Finding(
        kind=kind,
        severity=Severity.CRITICAL,
        summary=f"XID 48 (double bit ECC error) on {NODE} {BAD}",
        first_seen=t0,
        last_seen=t0,
        node=NODE,
        gpu_uuid=BAD,
    )


def _rules(**params: object) -> dict[str, object]:
    return {
        "hysteresis": {"open_after": 1},
        "rules": [{"name": "gpu-grain", "match": {"kinds": ["gpu_xid"]},
                   "playbook": "evict_gpu_pods", "mode": "auto", "params": params}],
    }  # fmt: skip


def exporter_view(sim: Sim, act: KubeActuator, now: float, node: str = NODE) -> ClusterView:
    """The live API's nodes and pods, with GPU -> pod as the node's dcgm-exporter labels it."""
    pod_of_gpu, gpus = exporter_gpus(sim, node)
    view = act.cluster_view(now)
    return dataclasses.replace(view, pod_of_gpu=pod_of_gpu, gpus_of_node={node: gpus})


def _run(policy: Policy, store: Store, sim: Sim, kind: FindingKind = FindingKind.GPU_XID) -> tuple[
    ActionRecord, KubeActuator
]:  # fmt: skip
    act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig)
    t0 = sim.wall()  # the cluster's clock: pod creation times and the view's agree
    eng = DecisionJournal(policy, store, started_at=t0 - 60)
    eng.cycle([_finding(t0, kind)], exporter_view(sim, act, t0), t0)
    runner = Executor(policy, store, act, owner="sim-test", open_incidents=eng.open_incident_ids)
    now = t0
    for _ in range(3):
        now += 31
        sim.advance(31)
        runner.run(exporter_view(sim, act, now), now)
    (a,) = store.actions()
    return a, act


def _uids(sim: Sim) -> dict[str, str]:
    return {
        f"{p['metadata']['namespace']}/{p['metadata']['name']}": str(p["metadata"]["uid"])
        for p in sim.cluster.pods_on(NODE)
    }


def _on_node(sim: Sim) -> dict[str, tuple[int, ...]]:
    return {p.key: p.gpu_indices for p in sim.cluster.running_pods() if p.node == NODE}


def test_the_exporter_labels_each_gpu_with_the_pod_the_cluster_placed_there(
    tmp_path: Path,
) -> None:
    with running_sim(tmp_path, dra=False) as sim:
        act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig)
        view = exporter_view(sim, act, sim.wall())
        act.close()
        placed = {
            gpu_uuid("small", NODE, d): p.key
            for p in sim.cluster.running_pods()
            if p.node == NODE
            for d in p.gpu_indices
        }
        assert view.pod_of_gpu == placed and len(placed) == 4
        assert len(view.gpus_of_node[NODE]) == 8


def test_xid48_evicts_only_the_pod_on_that_gpu_and_keeps_the_node_schedulable(
    tmp_path: Path, store: Store
) -> None:
    with running_sim(tmp_path, dra=False, faults=[XID48]) as sim:
        sim.advance(1)  # the device plugin marks GPU 1 Unhealthy: allocatable 7 of 8
        before = _uids(sim)
        a, act = _run(live_policy(_rules()), store, sim)
        try:
            assert a.state is ActionState.DONE, a
            guard, evict = a.plan
            assert guard.args["cordon"] is False and "withdrew" in str(guard.args["why"])
            assert (guard.args["capacity"], guard.args["allocatable"]) == (8, 7)
            assert evict.args["only"] == ["serving/serve-0"]
            assert [p[1] for p in evict.args["pods"]] == ["serve-0"]  # pinned before the write
            assert evict.args["pods_kept"] == ["serving/serve-1"]
            assert (
                len(evict.args["gpus_in_service"]) == 7 and BAD not in evict.args["gpus_in_service"]
            )
            node = act.node(NODE)
            assert node is not None and not node.unschedulable
            after = _on_node(sim)
            assert after["serving/serve-1"] == (2, 3)  # untouched
            assert _uids(sim)["serving/serve-1"] == before["serving/serve-1"]
            # serve-0 was evicted once; its replacement may use this node, never GPU 1
            assert all(1 not in gpus for gpus in after.values())
            serve0 = act.pod("serving", "serve-0")
            assert serve0 is None or serve0.uid != before["serving/serve-0"]
            done = [r.message for r in store.audit_log() if r.kind == "k8s_write"]
            assert any("left schedulable: allocatable nvidia.com/gpu 7" in m for m in done)
            assert a.result == (
                "evicted serving/serve-0; node schedulable: the other 7 GPUs stay in service "
                "(serving/serve-1 kept)"
            )
        finally:
            act.close()


def test_without_device_plugin_health_the_node_is_cordoned_and_the_journal_says_why(
    tmp_path: Path, store: Store
) -> None:
    with running_sim(tmp_path, dra=False) as sim:  # no XID in the cluster: allocatable 8 of 8
        a, act = _run(live_policy(_rules()), store, sim)
        try:
            assert a.state is ActionState.DONE, a
            guard = a.plan[0]
            assert guard.args["cordon"] is True and "DP_DISABLE_HEALTHCHECKS" in guard.args["why"]
            node = act.node(NODE)
            assert node is not None and node.unschedulable
            assert "serving/serve-1" in _on_node(sim)
            assert "serving/serve-0" not in _on_node(sim)  # cordoned: no replacement here
            done = [r.message for r in store.audit_log() if r.kind == "k8s_write"]
            assert any("did cordon_unless_withdrawn" in m and "cordoned" in m for m in done)
        finally:
            act.close()


def test_shadow_writes_nothing_and_node_level_faults_get_no_plan(
    tmp_path: Path, store: Store
) -> None:
    with running_sim(tmp_path, dra=False, faults=[XID48]) as sim:
        sim.advance(1)
        before = _on_node(sim)
        sim.api.request_counts(reset=True)
        a, act = _run(policy_from_dict(_rules(), "<shadow>"), store, sim)
        act.close()
        assert a.state is ActionState.SHADOW
        assert [i.op for i in a.plan] == ["cordon_unless_withdrawn", "evict_pods"]
        assert "[only serving/serve-0; 7 other GPUs stay in service]" in (a.result or "")
        writes = {k: n for k, n in sim.api.request_counts().items() if k.startswith(WRITES)}
        assert writes == {} and _on_node(sim) == before
    pb = PLAYBOOKS["evict_gpu_pods"]
    lost = Subject(IncidentId("i1"), "gpu_lost", "critical", "XID 79", node=NODE, gpu_uuid=BAD)
    plan = pb.plan(lost, ClusterView({NODE: NodeView(NODE, gpu_count=8)}), pb.params({}))
    assert isinstance(plan, NoPlan) and plan.reason.startswith("gpu_lost is a node-level fault")


def test_on_a_dra_node_a_fenced_gpu_keeps_the_node_schedulable(
    tmp_path: Path, store: Store
) -> None:
    """DRA, no device-plugin health (allocatable 8 of 8): gpufleet's DeviceTaintRule (fenced
    automatically, as gpu-grain.yaml does) is what keeps the GPU from new claims, so the guard
    of the approved eviction leaves the node schedulable."""
    rules = {
        "hysteresis": {"open_after": 1},
        "rules": [
            {"name": "fence", "match": {"kinds": ["gpu_xid"]}, "playbook": "fence_gpu",
             "mode": "auto"},
            {"name": "pods", "match": {"kinds": ["gpu_xid"]}, "playbook": "evict_gpu_pods",
             "mode": "approval"},
        ],
    }  # fmt: skip
    with running_sim(tmp_path, dra=True) as sim:
        act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig)
        policy = live_policy(rules)
        t0 = sim.wall()
        eng = DecisionJournal(policy, store, started_at=t0 - 60)
        eng.cycle([_finding(t0)], exporter_view(sim, act, t0), t0)
        runner = Executor(policy, store, act, owner="t", open_incidents=eng.open_incident_ids)
        now = t0
        for i in range(4):
            if i == 1:
                pending = next(a for a in store.actions() if a.playbook == "evict_gpu_pods")
                eng.approve(pending.id, "alice", now)
            now += 31
            sim.advance(31)
            runner.run(exporter_view(sim, act, now), now)
        by = {a.playbook: a for a in store.actions()}
        act.close()
        assert by["fence_gpu"].state is ActionState.DONE, by["fence_gpu"]
        pods = by["evict_gpu_pods"]
        assert pods.state is ActionState.DONE, pods
        guard = pods.plan[0].args
        assert guard["cordon"] is False and "DeviceTaintRule" in str(guard["why"])
        assert "serving/serve-1" in _on_node(sim)
        assert all(1 not in gpus for gpus in _on_node(sim).values())


def test_xid79_evidence_is_the_node_grain() -> None:
    pb = PLAYBOOKS["evict_gpu_pods"]
    view = ClusterView({NODE: NodeView(NODE, gpu_count=8)})
    bus = Subject(
        IncidentId("i1"), "gpu_xid", "critical", "XID 79", node=NODE, gpu_uuid=BAD,
        evidence={"xid": 79, "nvidia_action": "RESTART_BM"},
    )  # fmt: skip
    plan = pb.plan(bus, view, pb.params({}))
    assert isinstance(plan, NoPlan) and "RESTART_BM" in plan.reason
    dbe = dataclasses.replace(bus, evidence={"xid": 48, "nvidia_action": "RESET_GPU"})
    assert not isinstance(pb.plan(dbe, view, pb.params({})), NoPlan)


def test_a_holder_replaced_while_awaiting_approval_fails_the_action_untouched(
    tmp_path: Path, store: Store
) -> None:
    """`ml/train-worker-0` held GPU 1 of h100-0000 at the decision; before a person approved, it
    was replaced by a pod of the same name on the same node (h100-0001 and -0003 cordoned by
    a person). Which GPUs the new pod holds nobody has seen yet: the eviction is refused."""
    node, bad = "h100-0000", gpu_uuid("small", "h100-0000", 1)
    rules = _rules()
    rules["rules"][0]["mode"] = "approval"  # type: ignore[index]
    rules["gates"] = {"blast_radius": {"max_nodes": 4, "max_percent_of_pool": 100}}
    policy = live_policy(rules)
    with running_sim(tmp_path, dra=False) as sim:
        act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig)
        try:
            t0 = sim.wall()
            f = dataclasses.replace(_finding(t0), node=node, gpu_uuid=bad)
            eng = DecisionJournal(policy, store, started_at=t0 - 60)
            eng.cycle([f], exporter_view(sim, act, t0, node), t0)
            for other in ("h100-0001", "h100-0003"):
                act.core.patch_node(other, {"spec": {"unschedulable": True}})
            sim.advance(5)
            act.core.delete_namespaced_pod("train-worker-0", "ml")  # replaced by its controller
            sim.advance(31)
            new = act.pod("ml", "train-worker-0")
            assert new is not None and new.node == node and (new.created or 0) > t0
            (a,) = store.actions()
            eng.approve(a.id, "alice", t0 + 40)
            runner = Executor(policy, store, act, owner="t", open_incidents=eng.open_incident_ids)
            now = t0 + 40
            for _ in range(2):
                now += 31
                sim.advance(31)
                runner.run(exporter_view(sim, act, now, node), now)
            (a,) = store.actions()
            assert a.state is ActionState.FAILED and "was replaced" in (a.result or ""), a
            still = act.pod("ml", "train-worker-0")
            assert still is not None and still.uid == new.uid  # not evicted
            guarded = act.node(node)
            assert guarded is not None and guarded.unschedulable  # the guard's cordon stays
        finally:
            act.close()


@pytest.mark.parametrize(
    ("capacity", "allocatable", "keep", "says"),
    [
        (8, 7, True, "withdrew the faulty GPU"),
        (8, 8, False, "DP_DISABLE_HEALTHCHECKS"),
        (8, 6, False, "2 GPUs withdrawn"),
        (8, 0, False, "8 GPUs withdrawn"),  # the plugin lost NVML: every device unhealthy
        (None, None, False, "no nvidia.com/gpu capacity"),
    ],
)
def test_the_guard_keeps_the_node_schedulable_only_when_one_gpu_is_withdrawn(
    capacity: int | None, allocatable: int | None, keep: bool, says: str
) -> None:
    node = NodeView(NODE, gpu_capacity=capacity, gpu_allocatable=allocatable)
    verdict, why = keep_schedulable(node)
    assert verdict is keep and says in why
