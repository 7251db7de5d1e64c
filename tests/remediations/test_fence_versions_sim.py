"""fence_gpu on each Kubernetes release the simulator can be (`kubernetes_version`), through the
executor and the real `kubernetes` client: the DeviceTaintRule is written at the version that
release serves (v1alpha3 on 1.34/1.35 and v1beta2 on 1.36 with the DRADeviceTaints gate on, v1 on
1.37), and where none is served the step falls back to the pods-on-GPU grain's guard with the
reason journaled and logged, never a permanent error per fence."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from harness.k8s_sim import running_sim
from kube.actuator import KubeActuator
from remediations.cluster_names import GUARD_OP, fence_rule_name
from remediations.decision_journal import DecisionJournal
from remediations.executor import Executor
from remediations.store import ActionRecord, Store
from remediations.types import DEVICE_TAINTS_NOT_SERVED as NOT_SERVED
from remediations.types import ActionState, Verdict
from tests.remediations.helpers import live_policy
from tests.remediations.test_fence_gpu_sim import BAD, NODE, T0, _rules, _run, xid48

RULE_APIS: dict[str, Callable[[client.ApiClient], Any]] = {
    "v1": client.ResourceV1Api,
    "v1beta2": client.ResourceV1beta2Api,
    "v1alpha3": client.ResourceV1alpha3Api,
}


@pytest.mark.parametrize(
    ("release", "version"), [("1.34", "v1alpha3"), ("1.35", "v1alpha3"), ("1.36", "v1beta2")]
)
def test_fence_uses_the_version_the_release_serves(
    tmp_path: Path, store: Store, release: str, version: str
) -> None:
    with running_sim(
        tmp_path, history=5000, kubernetes_version=release, dra_device_taint_gate=True
    ) as sim:
        act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig)
        try:
            (a,) = _run(live_policy(_rules()), store, act, sim, xid48())
            assert a.state is ActionState.DONE, a
            rule = RULE_APIS[version](act.api).read_device_taint_rule(fence_rule_name(BAD))
            assert rule.api_version == f"resource.k8s.io/{version}"
            assert rule.spec.device_selector.device == "gpu-2"
            assert set(sim.cluster.device_taints) == {(NODE, 2)}
            (fenced,) = act.fenced_gpus()
            assert (fenced.node, fenced.index, fenced.effect) == (NODE, 2, "NoSchedule")
            node = act.node(NODE)
            assert node is not None and not node.unschedulable
        finally:
            act.close()


@pytest.mark.parametrize("release", ["1.34", "1.35", "1.36"])
def test_without_device_taints_the_fence_falls_back_to_the_pods_on_gpu_grain(
    tmp_path: Path, store: Store, release: str, caplog: pytest.LogCaptureFixture
) -> None:
    with running_sim(tmp_path, history=5000, kubernetes_version=release) as sim:
        act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig)
        try:
            with caplog.at_level(logging.WARNING, logger="kube.dra"):
                (a,) = _run(live_policy(_rules()), store, act, sim, xid48())
            assert a.state is ActionState.DONE, a
            (step,) = a.plan
            assert step.op == GUARD_OP and step.args["gpu"] == BAD
            assert NOT_SERVED in str(step.args["why"])
            assert "pods-on-GPU grain" in str(a.result)
            # the device plugin has not withdrawn the GPU: the guard cordons, as the grain does
            node = act.node(NODE)
            assert node is not None and node.unschedulable
            assert not sim.cluster.device_taints  # no rule anywhere
            assert act.fenced_gpus() == []
            assert any(NOT_SERVED in r.getMessage() for r in caplog.records)
        finally:
            act.close()


def test_a_dry_run_fence_is_not_planned_where_device_taints_are_not_served(
    tmp_path: Path, store: Store
) -> None:
    with running_sim(tmp_path, history=5000, kubernetes_version="1.35") as sim:
        act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig)
        try:
            eng = DecisionJournal(live_policy(_rules(effect="None")), store, started_at=T0 - 60)
            (d,) = eng.cycle([xid48()], act.cluster_view(T0), T0).decisions
            assert d.plan is None and NOT_SERVED in d.reasons[0]
            assert store.actions() == []
            node = act.node(NODE)
            assert node is not None and not node.unschedulable
        finally:
            act.close()


def test_the_fallback_counts_toward_the_blast_radius(tmp_path: Path, store: Store) -> None:
    """The pods-on-GPU grain may cordon: unlike a DeviceTaintRule, it is budgeted."""
    with running_sim(tmp_path, history=5000, kubernetes_version="1.36") as sim:
        act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig)
        try:
            policy = live_policy({**_rules(), "gates": {"blast_radius": {"max_nodes": 0}}})
            eng = DecisionJournal(policy, store, started_at=T0 - 60)
            (d,) = eng.cycle([xid48()], act.cluster_view(T0), T0).decisions
            assert d.plan is not None and d.plan.disruptive
            assert d.decision is not Verdict.EXECUTE and "blast_radius" in " ".join(d.reasons)
            node = act.node(NODE)
            assert node is not None and not node.unschedulable
        finally:
            act.close()


def _pinned_fallback(
    tmp_path: Path, store: Store, effect: str
) -> tuple[ActionRecord, set[str], set[str]]:
    """fence_gpu of `effect` planned before discovery on a 1.34 cluster (DRA claims, no
    DeviceTaintRules), run to the end: (the action, the GPU's holders before, the pods after)."""
    with running_sim(tmp_path, history=5000, kubernetes_version="1.34") as sim:
        act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig)
        try:
            holders = {
                p.key for p in sim.cluster.running_pods() if p.node == NODE and 2 in p.gpu_indices
            }
            policy = live_policy(_rules(effect=effect))
            eng = DecisionJournal(policy, store, started_at=T0 - 60)
            unknown = replace(act.cluster_view(T0), device_taints=None)
            eng.cycle([xid48()], unknown, T0)
            runner = Executor(policy, store, act, owner="t", open_incidents=eng.open_incident_ids)
            runner.run(act.cluster_view(T0 + 31), T0 + 31)
            runner.run(act.cluster_view(T0 + 62), T0 + 62)
            (a,) = store.actions()
            node = act.node(NODE)
            assert node is not None and node.unschedulable  # cordoned either way
            after = {p.key for p in sim.cluster.running_pods() if p.node == NODE}
            return a, holders, after
        finally:
            act.close()


def test_a_no_execute_fence_pinned_to_the_fallback_evicts_the_gpus_pods(
    tmp_path: Path, store: Store
) -> None:
    a, holders, after = _pinned_fallback(tmp_path, store, "NoExecute")
    assert holders  # the small fleet's training rank holds GPU 2
    assert a.state is ActionState.DONE, a
    (step,) = a.plan
    assert step.op == GUARD_OP
    assert "the pods holding the GPU are evicted" in str(step.args["why"])
    assert sorted(f"{p[0]}/{p[1]}" for p in step.args["pods"]) == sorted(holders)
    assert f"evicted {', '.join(sorted(holders))}; node cordoned" in str(a.result)
    assert not holders & after


def test_a_no_schedule_fence_pinned_to_the_fallback_only_cordons_and_says_so(
    tmp_path: Path, store: Store
) -> None:
    """A view that does not know what the cluster serves plans a DeviceTaintRule; the step is
    pinned to the grain's guard when the cluster turns out to serve none."""
    a, holders, after = _pinned_fallback(tmp_path, store, "NoSchedule")
    assert a.state is ActionState.DONE, a
    (step,) = a.plan
    assert step.op == GUARD_OP and NOT_SERVED in str(step.args["why"])
    assert "no pod is evicted" in str(step.args["why"]) and "pods" not in step.args
    assert holders <= after


def test_the_planned_fallback_says_what_it_does(tmp_path: Path, store: Store) -> None:
    with running_sim(tmp_path, history=5000, kubernetes_version="1.35") as sim:
        act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig)
        try:
            eng = DecisionJournal(live_policy(_rules(effect="NoExecute")), store, started_at=T0)
            (d,) = eng.cycle([xid48()], act.cluster_view(T0), T0).decisions
            assert d.plan is not None and d.plan.intents[0].op == GUARD_OP
            assert "the pods holding the GPU are evicted" in str(d.plan.intents[0].args["fallback"])
        finally:
            act.close()
