"""Diagnose and return to service, against the simulator's Kubernetes API with the real client.

Two nodes are quarantined by gpufleet (through the journal and the real actuator); the job
creates one batch/v1 Job per node pinned to it; the simulator completes them pass (h100-0001)
and fail (h100-0003). The passing node gets back exactly what it had: gpufleet's taint and label
removed, uncordoned, a foreign taint kept; the failing node stays cordoned and is labelled for
hardware replacement. A re-run reads the same Jobs instead of creating new ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.k8s_sim import Sim, running_sim
from harness.live_policy import live_policy, live_policy_dict
from kube.actuator import KubeActuator
from kube.jobs import KubeNodeJobs, api_client
from remediations.cycle import RemediationCycle
from remediations.holds import holds, owner
from remediations.playbooks import PLAYBOOKS, Subject
from remediations.policy import Policy, policy_from_dict
from remediations.scheduled.context import JobContext, JobRequest
from remediations.scheduled.diagnose import REPLACEMENT_LABEL, DiagnoseParams, run_diagnose
from remediations.scheduled.gated import execute, plan_for, propose
from remediations.store import Store
from remediations.types import QUARANTINE_LABEL, QUARANTINE_TAINT, IncidentId


def service_policy() -> Policy:
    return live_policy()


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(tmp_path, diagnostics={"h100-0003": "fail"}, diagnostic_seconds=120) as s:
        yield s


@pytest.fixture
def parts(sim: Sim, tmp_path: Path) -> Iterator[tuple[RemediationCycle, KubeNodeJobs]]:
    store = Store.open(f"sqlite:///{tmp_path / 'j.db'}", cluster="small")
    actuator = KubeActuator.from_kubeconfig(sim.sa_kubeconfig, clock=sim.cluster.clock)
    loop = RemediationCycle(
        service_policy(), store, actuator, "svc-test", started_at=sim.cluster.clock() - 60
    )
    diag = KubeNodeJobs(api_client(sim.sa_kubeconfig))
    yield loop, diag
    diag.close()
    actuator.close()
    store.close()


def _quarantine(loop: RemediationCycle, node: str, now: float) -> None:
    view = loop.actuator.cluster_view(now)
    subject = Subject(IncidentId(f"inc-{node}"), "gpu_memory", "critical", "DBE", node)
    plan = plan_for("quarantine", subject, view, PLAYBOOKS["quarantine"].params({}))
    assert not isinstance(plan, str)
    action, why = propose(
        loop, "test", f"inc-{node}", "gpu_memory", now, plan, view, now, reasons=("test",)
    )
    assert action is not None, why
    execute(loop, [action.id], view, now)


def _node(sim: Sim, name: str) -> dict[str, Any]:
    return sim.cluster.get("nodes", "", name)


def test_diagnose_returns_passing_nodes_and_flags_failing_ones(
    sim: Sim, parts: tuple[RemediationCycle, KubeNodeJobs]
) -> None:
    loop, diag = parts
    now = sim.cluster.clock()
    for node in ("h100-0001", "h100-0003"):
        _quarantine(loop, node, now)
    foreign = {"key": "team.example/keep", "value": "x", "effect": "NoSchedule"}
    n1 = _node(sim, "h100-0001")
    sim.cluster.write(
        "nodes", {**n1, "spec": {**n1["spec"], "taints": [*n1["spec"]["taints"], foreign]}}
    )
    assert _node(sim, "h100-0001")["spec"]["unschedulable"] is True
    sim.advance(120)  # past the policy's cooldown on these nodes

    def sleep(seconds: float) -> bool:
        sim.advance(60)  # each poll: a minute of scenario time
        return False

    ctx = JobContext(loop, clock=sim.cluster.clock, diagnostics=diag, sleep=sleep)
    params = DiagnoseParams(wait=60, poll=0.01, require_idle=False)
    req = JobRequest("diag", "diagnose_and_return", 0.0, params, 0.0, sim.cluster.clock())
    out = run_diagnose(ctx, req)
    assert out.details["outcomes"] == {"node/h100-0001": "passed", "node/h100-0003": "failed"}

    jobs = sim.cluster.store.objects("jobs", "gpufleet-jobs")[1]
    assert len(jobs) == 2
    pinned = {j["spec"]["template"]["spec"]["nodeName"] for j in jobs}
    assert pinned == {"h100-0001", "h100-0003"}
    assert jobs[0]["spec"]["template"]["spec"]["containers"][0]["command"] == [
        "dcgmi", "diag", "-r", "2"
    ]  # fmt: skip

    ok = _node(sim, "h100-0001")
    assert not ok["spec"].get("unschedulable")
    assert QUARANTINE_LABEL not in ok["metadata"].get("labels", {})
    assert [t["key"] for t in ok["spec"].get("taints") or []] == ["team.example/keep"]
    bad = _node(sim, "h100-0003")
    assert bad["spec"]["unschedulable"] is True
    assert REPLACEMENT_LABEL in bad["metadata"]["labels"]
    assert any(t["key"] == QUARANTINE_TAINT for t in bad["spec"]["taints"])

    rules = {
        a.playbook: a.state.value for a in loop.engine.store.actions() if a.rule == "schedule:diag"
    }
    assert rules == {"uncordon": "done", "mark_replacement": "done"}
    log = loop.engine.store.audit_log()
    writes = [a.message for a in log if a.kind == "k8s_write" and "gpufleet-diag-" in a.message]
    assert len(writes) == 4  # "about to" and "did", for each of the two Jobs
    verdicts = {a.target: a.detail["outcome"] for a in log if a.kind == "diagnostic"}
    assert verdicts == {"node/h100-0001": "passed", "node/h100-0003": "failed"}
    # the failed verdict says why, in the Job container's words (its pod's termination message)
    notes = {a.target: a.detail["note"] for a in log if a.kind == "diagnostic"}
    assert notes == {"node/h100-0001": "", "node/h100-0003": "diagnostics failed"}
    assert [a.target for a in log if a.kind == "needs_person"] == ["node/h100-0003"]

    again = run_diagnose(ctx, req)  # nothing quarantined and unflagged is left
    assert again.details["outcomes"] == {}
    assert len(sim.cluster.store.objects("jobs", "gpufleet-jobs")[1]) == 2


def test_shadow_policy_creates_no_diagnostic_job(sim: Sim, tmp_path: Path) -> None:
    """Under the policy's top-level `actuation: shadow` the job creates no Job (a Kubernetes
    write) and journals which it would have created."""
    store = Store.open(f"sqlite:///{tmp_path / 'shadow.db'}", cluster="small")
    actuator = KubeActuator.from_kubeconfig(sim.sa_kubeconfig, clock=sim.cluster.clock)
    diag = KubeNodeJobs(api_client(sim.sa_kubeconfig))
    try:
        n = _node(sim, "h100-0003")  # quarantined earlier (by a person, or a live gpufleet)
        labels = {**n["metadata"].get("labels", {}), QUARANTINE_LABEL: "x"}
        sim.cluster.write("nodes", {**n, "metadata": {**n["metadata"], "labels": labels}})
        shadow = policy_from_dict({**live_policy_dict(), "actuation": "shadow"})
        loop = RemediationCycle(shadow, store, actuator, "svc", started_at=sim.cluster.clock())
        ctx = JobContext(loop, clock=sim.cluster.clock, diagnostics=diag)
        params = DiagnoseParams(wait=0, require_idle=False)
        req = JobRequest("diag", "diagnose_and_return", 0.0, params, 0.0, sim.cluster.clock())
        out = run_diagnose(ctx, req)
        assert out.ok and out.summary.startswith("shadow: would diagnose 1 node(s)"), out
        assert sim.cluster.store.objects("jobs", "gpufleet-jobs")[1] == []
        msgs = [r.message for r in store.audit_log()]
        assert any(m.startswith("shadow: would create diagnostic job gpufleet-jobs/") for m in msgs)
        assert store.actions() == []
    finally:
        diag.close()
        actuator.close()
        store.close()


def test_a_failed_diagnostic_marks_a_node_for_replacement_without_waiting_for_its_cooldown(
    sim: Sim, tmp_path: Path
) -> None:
    """The replacement mark is a label on a node gpufleet already holds: it takes nothing more
    away, so neither the quarantine's cooldown nor the budgets of new disruptions hold it up."""
    p = live_policy_dict()
    p["gates"] = {**p["gates"], "attempts": {"cooldown": "6h"}, "rate": {"max_actions_per_hour": 1}}
    store = Store.open(f"sqlite:///{tmp_path / 'cool.db'}", cluster="small")
    actuator = KubeActuator.from_kubeconfig(sim.sa_kubeconfig, clock=sim.cluster.clock)
    diag = KubeNodeJobs(api_client(sim.sa_kubeconfig))
    try:
        loop = RemediationCycle(
            policy_from_dict(p, "cool"), store, actuator, "svc", started_at=sim.cluster.clock()
        )
        _quarantine(loop, "h100-0003", sim.cluster.clock())
        assert QUARANTINE_LABEL in _node(sim, "h100-0003")["metadata"]["labels"]
        sim.advance(60)  # well inside the 6 h cooldown and the hour's one action

        def sleep(seconds: float) -> bool:
            sim.advance(60)
            return False

        def ticking() -> float:  # the journal's rows a second apart, as on a real clock
            sim.wall.advance(1)
            return sim.cluster.clock()

        ctx = JobContext(loop, clock=ticking, diagnostics=diag, sleep=sleep)
        params = DiagnoseParams(wait=60, poll=0.01, require_idle=False)
        req = JobRequest("diag", "diagnose_and_return", 0.0, params, 0.0, sim.cluster.clock())
        out = run_diagnose(ctx, req)
        assert out.details["outcomes"] == {"node/h100-0003": "failed"}, out
        bad = _node(sim, "h100-0003")
        assert REPLACEMENT_LABEL in bad["metadata"]["labels"], out.details["nodes"]
        assert bad["spec"]["unschedulable"] is True
        told = [r for r in store.audit_log() if r.kind == "needs_person"]
        assert [r.target for r in told] == ["node/h100-0003"]
        # the mark leaves the node a person's: an owned hold, never reported as an orphan
        (held,) = holds(actuator.cluster_view(sim.cluster.clock()))
        assert owner(store, held) is not None
    finally:
        diag.close()
        actuator.close()
        store.close()
