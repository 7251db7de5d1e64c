"""Maintenance window against the simulator's API: a node with an open warning-level hardware
incident is drained by the scheduled job inside its window (gated and journaled like any
action), and a run that starts after its window closed drains nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from detectors.findings import Finding, FindingKind, Severity
from harness.k8s_sim import Sim, running_sim
from harness.live_policy import QUARANTINE_CRITICAL, live_policy_dict
from kube.actuator import KubeActuator
from remediations.cycle import RemediationCycle
from remediations.decisions import SHADOW_EXECUTE
from remediations.policy import policy_from_dict
from remediations.scheduled.context import JobContext, JobRequest
from remediations.scheduled.maintenance import MaintenanceParams, run_maintenance
from remediations.store import Store
from remediations.types import ActionState
from tests.service.test_diagnose_sim import service_policy


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(tmp_path) as s:
        s.advance(60)  # workload pods are Running
        yield s


@pytest.fixture
def loop(sim: Sim, tmp_path: Path) -> Iterator[RemediationCycle]:
    store = Store.open(f"sqlite:///{tmp_path / 'j.db'}", cluster="small")
    actuator = KubeActuator.from_kubeconfig(sim.sa_kubeconfig, clock=sim.cluster.clock)
    yield RemediationCycle(
        service_policy(), store, actuator, "svc-test", started_at=sim.cluster.clock() - 60
    )
    actuator.close()
    store.close()


def _throttle(node: str, t0: float, t: float) -> Finding:
    return Finding(
        FindingKind.GPU_THROTTLE, Severity.WARNING, f"thermal throttle on {node}", t0, t, node,
        f"GPU-{node}-0",
    )  # fmt: skip


def _incidents(sim: Sim, loop: RemediationCycle, nodes: list[str]) -> None:
    t0 = sim.cluster.clock()
    for _ in range(2):  # hysteresis: a warning opens an incident after two cycles
        now = sim.cluster.clock()
        loop.tick([_throttle(n, t0, now) for n in nodes], now)
        sim.advance(30)


def _pods_on(sim: Sim, node: str) -> list[str]:
    return [
        p["metadata"]["name"]
        for p in sim.cluster.pods_on(node)
        if p["metadata"]["ownerReferences"][0]["kind"] != "DaemonSet"
    ]


def test_drains_inside_the_window_only(sim: Sim, loop: RemediationCycle) -> None:
    _incidents(sim, loop, ["h100-0002"])
    assert [i.node for i in loop.engine.store.open_incidents()] == ["h100-0002"]
    assert _pods_on(sim, "h100-0002")
    ctx = JobContext(loop, clock=sim.cluster.clock)
    params = MaintenanceParams(window=60)

    closed = JobRequest("mw", "maintenance_window", 1000.0, params, 1061.0, sim.cluster.clock())
    out = run_maintenance(ctx, closed)
    assert "window closed" in out.summary
    assert not sim.cluster.get("nodes", "", "h100-0002")["spec"].get("unschedulable")
    assert loop.engine.store.actions() == []

    inside = JobRequest("mw", "maintenance_window", 1000.0, params, 1010.0, sim.cluster.clock())
    out = run_maintenance(ctx, inside)
    assert out.ok and "1 drain(s)" in out.summary, out
    assert sim.cluster.get("nodes", "", "h100-0002")["spec"]["unschedulable"] is True
    assert _pods_on(sim, "h100-0002") == []
    (action,) = loop.engine.store.actions()
    assert (action.playbook, action.rule, action.state.value) == ("drain", "schedule:mw", "done")

    again = run_maintenance(ctx, inside)  # same incident: already drained, nothing new
    assert len(loop.engine.store.actions()) == 1, again


WRITES = ("POST", "PUT", "PATCH", "DELETE")


def test_shadow_policy_drains_nothing_and_journals_what_it_would_do(
    sim: Sim, tmp_path: Path
) -> None:
    """Scheduled jobs have no rule: they follow the policy's top-level actuation. A policy that
    is shadow at the top level (even with a live rule) keeps the maintenance window in shadow:
    no write request reaches the API server, and the journal says what it would have drained,
    once (a later run does not journal it again)."""
    shadow = live_policy_dict([{**QUARANTINE_CRITICAL, "actuation": "live"}])
    shadow["actuation"] = "shadow"
    store = Store.open(f"sqlite:///{tmp_path / 'shadow.db'}", cluster="small")
    actuator = KubeActuator.from_kubeconfig(sim.sa_kubeconfig, clock=sim.cluster.clock)
    try:
        loop = RemediationCycle(
            policy_from_dict(shadow), store, actuator, "svc-shadow",
            started_at=sim.cluster.clock() - 60,
        )  # fmt: skip
        _incidents(sim, loop, ["h100-0002"])
        counters = [sim.api.faults.add(r".*", status=0, count=-1, method=m) for m in WRITES]
        ctx = JobContext(loop, clock=sim.cluster.clock)
        inside = JobRequest(
            "mw", "maintenance_window", 1000.0, MaintenanceParams(window=60), 1010.0,
            sim.cluster.clock(),
        )  # fmt: skip
        out = run_maintenance(ctx, inside)
        assert out.ok and "1 drain(s) journaled" in out.summary and "shadow" in out.summary, out
        again = run_maintenance(ctx, inside)
        assert "0 drain(s)" in again.summary and "already journaled" in str(again.details), again

        assert [c.hits for c in counters] == [0, 0, 0, 0]
        assert not sim.cluster.get("nodes", "", "h100-0002")["spec"].get("unschedulable")
        assert _pods_on(sim, "h100-0002")
        (action,) = store.actions()
        assert (action.playbook, action.rule) == ("drain", "schedule:mw")
        assert action.state is ActionState.SHADOW and action.dry_run
        assert action.result.startswith("shadow: would drain node/h100-0002 (cordon h100-0002")
        assert SHADOW_EXECUTE in action.reasons
        assert any(r.startswith("maintenance window mw") for r in action.reasons)
        audit = [r.message for r in store.audit_log()]
        assert any(m.startswith("shadow: would drain node/h100-0002") for m in audit), audit
        assert not [r for r in store.audit_log() if r.kind == "k8s_write"]
        with pytest.raises(ValueError, match="shadow mode"):
            loop.engine.approve(action.id, "alice", sim.cluster.clock())
    finally:
        actuator.close()
        store.close()
