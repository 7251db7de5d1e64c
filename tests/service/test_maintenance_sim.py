"""Maintenance window against the simulator's API: a node with an open warning-level hardware
incident is drained by the scheduled job inside its window (gated and journaled like any
action), and a run that starts after its window closed drains nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from detectors.findings import Finding, FindingKind, Severity
from gpufleet.service.context import JobContext, JobRequest
from gpufleet.service.jobs.maintenance import MaintenanceParams, run_maintenance
from remediations.cycle import RemediationLoop
from remediations.kube_actuator import KubeActuator
from remediations.store import Store
from tests.k8s_sim_support import Sim, running_sim
from tests.service.test_diagnose_sim import service_policy


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(tmp_path) as s:
        s.advance(60)  # workload pods are Running
        yield s


@pytest.fixture
def loop(sim: Sim, tmp_path: Path) -> Iterator[RemediationLoop]:
    store = Store.open(f"sqlite:///{tmp_path / 'j.db'}", cluster="small")
    actuator = KubeActuator.from_kubeconfig(sim.kubeconfig, clock=sim.cluster.clock)
    yield RemediationLoop(
        service_policy(), store, actuator, "svc-test", started_at=sim.cluster.clock() - 60
    )
    actuator.close()
    store.close()


def _throttle(node: str, t0: float, t: float) -> Finding:
    return Finding(
        FindingKind.GPU_THROTTLE, Severity.WARNING, f"thermal throttle on {node}", t0, t, node,
        f"GPU-{node}-0",
    )  # fmt: skip


def _incidents(sim: Sim, loop: RemediationLoop, nodes: list[str]) -> None:
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


def test_drains_inside_the_window_only(sim: Sim, loop: RemediationLoop) -> None:
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
