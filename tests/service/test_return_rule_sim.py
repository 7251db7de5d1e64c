"""The one return-to-service rule and stale approvals, against the simulator's Kubernetes API.

Both failures seen on `make demo` (issue 23), reproduced with the real decision journal, gates,
executor, actuator (the real `kubernetes` client) and the scheduled `diagnose_and_return`:

- a node whose GPU still reports uncorrectable ECC errors (its critical `gpu_memory` incident
  open, the finding still firing) went back into service because a diagnostic passed;
- a drain that waited for approval while the node was returned cordoned the healthy node when a
  person approved it later, and nothing ever returned it.

The findings come from the test (a detector's statement: critical DBE on GPU 2 of h100-0001)
and go through the journal's cycle as the live service's do, so incidents, hysteresis and the
policy's rules are the real ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from detectors.findings import Finding, FindingKind, Severity
from harness.k8s_sim import Sim, running_sim
from harness.live_policy import QUARANTINE_CRITICAL, live_policy_dict
from kube.actuator import KubeActuator
from kube.jobs import KubeNodeJobs, api_client
from remediations.cycle import RemediationCycle
from remediations.policy import policy_from_dict
from remediations.scheduled.context import JobContext, JobRequest
from remediations.scheduled.diagnose import REPLACEMENT_LABEL, DiagnoseParams, run_diagnose
from remediations.store import Store
from remediations.types import QUARANTINE_LABEL, ActionState, IncidentStatus
from remediations.validation import record_diagnosis
from simulator.layout import gpu_uuid

NODE = "h100-0001"
BAD = gpu_uuid("small", NODE, 2)
DRAIN_ON_APPROVAL = {
    "name": "drain-critical",
    "match": {"kinds": ["gpu_memory"], "severities": ["critical"]},
    "playbook": "drain",
    "mode": "approval",
}
QUIET = 300.0


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(tmp_path, diagnostic_seconds=60) as s:  # every diagnostic passes
        yield s


@pytest.fixture
def parts(sim: Sim, tmp_path: Path) -> Iterator[tuple[RemediationCycle, KubeNodeJobs]]:
    policy = live_policy_dict([QUARANTINE_CRITICAL, DRAIN_ON_APPROVAL])
    policy["gates"] = {**policy["gates"], "return_quiet": f"{QUIET:.0f}s"}
    store = Store.open(f"sqlite:///{tmp_path / 'r.db'}", cluster="small")
    actuator = KubeActuator.from_kubeconfig(sim.kubeconfig, clock=sim.cluster.clock)
    loop = RemediationCycle(
        policy_from_dict(policy, "test-policy"),
        store,
        actuator,
        "svc-test",
        started_at=sim.cluster.clock() - 60,
    )
    diag = KubeNodeJobs(api_client(sim.kubeconfig))
    yield loop, diag
    diag.close()
    actuator.close()
    store.close()


def _dbe(first: float, now: float) -> Finding:
    return Finding(
        FindingKind.GPU_MEMORY,
        Severity.CRITICAL,
        f"uncorrectable ECC (DBE) errors on GPU 2 of {NODE}",
        first,
        now,
        node=NODE,
        gpu_uuid=BAD,
        detector="gpu_memory",
    )


def _cycle(loop: RemediationCycle, sim: Sim, findings: list[Finding]) -> None:
    now = sim.cluster.clock()
    loop.tick(findings, now, loop.actuator.cluster_view(now))


def _diagnose(loop: RemediationCycle, diag: KubeNodeJobs, sim: Sim) -> dict[str, Any]:
    def sleep(seconds: float) -> bool:
        sim.advance(30)
        return False

    ctx = JobContext(loop, clock=sim.cluster.clock, diagnostics=diag, sleep=sleep)
    p = DiagnoseParams(wait=120, poll=0.01, require_idle=False)
    now = sim.cluster.clock()
    out = run_diagnose(ctx, JobRequest("diag", "diagnose_and_return", 0.0, p, 0.0, now))
    assert out.ok, out
    return dict(out.details)


def _node(sim: Sim) -> dict[str, Any]:
    return sim.cluster.get("nodes", "", NODE)


def _in_service(sim: Sim) -> bool:
    n = _node(sim)
    return not n["spec"].get("unschedulable") and QUARANTINE_LABEL not in n["metadata"].get(
        "labels", {}
    )


def _denials(loop: RemediationCycle) -> list[str]:
    return [
        reason
        for r in loop.engine.store.audit_log()
        if r.kind == "decision" and r.message.startswith(f"uncordon on node/{NODE}: deny")
        for reason in r.detail.get("reasons", [])
    ]


def test_a_passed_diagnostic_does_not_return_a_node_whose_gpu_fault_is_open(
    sim: Sim, parts: tuple[RemediationCycle, KubeNodeJobs]
) -> None:
    loop, diag = parts
    first = sim.cluster.clock()
    _cycle(loop, sim, [_dbe(first, first)])
    assert not _in_service(sim)  # quarantined at once (critical, auto)
    sim.advance(120)  # past the cooldown; the DBE counter still rises
    _cycle(loop, sim, [_dbe(first, sim.cluster.clock())])

    out = _diagnose(loop, diag, sim)
    assert out["outcomes"] == {f"node/{NODE}": "passed"}  # the diagnostic misses the bad row
    assert not _in_service(sim), out["nodes"]
    (why,) = _denials(loop)
    assert "waits for its open hardware incident(s) to close (gpu_memory critical" in why, why

    # the fault is repaired: no more findings; hysteresis resolves the incident after 3 cycles
    for _ in range(3):
        sim.advance(30)
        _cycle(loop, sim, [])
    (inc,) = loop.engine.store.incidents_on(NODE)
    assert inc.status is IncidentStatus.RESOLVED
    assert sim.cluster.clock() - inc.last_seen < QUIET
    _diagnose(loop, diag, sim)  # the passed verdict stands, but the signals are not quiet long
    assert not _in_service(sim)
    assert "waits for its fault signals to stay quiet for 300s" in _denials(loop)[-1]
    sim.advance(inc.last_seen + QUIET - sim.cluster.clock())
    _diagnose(loop, diag, sim)
    assert _in_service(sim)  # no deadlock: once all three hold, it goes back


def test_a_late_approval_of_a_drain_for_a_returned_node_expires_and_writes_nothing(
    sim: Sim, parts: tuple[RemediationCycle, KubeNodeJobs]
) -> None:
    loop, diag = parts
    store = loop.engine.store
    first = sim.cluster.clock()
    _cycle(loop, sim, [_dbe(first, first)])
    sim.advance(120)
    _cycle(loop, sim, [_dbe(first, sim.cluster.clock())])
    (drain,) = store.actions([ActionState.AWAITING_APPROVAL])
    assert drain.playbook == "drain"

    # a person vouches for the node (the errors were a known exporter glitch): it goes back
    record_diagnosis(
        store, sim.cluster.clock(), f"node/{NODE}", "waived", node=NODE, actor="alice",
        note="DBE counter glitch, see ticket 42",
    )  # fmt: skip
    _diagnose(loop, diag, sim)
    assert _in_service(sim)
    sim.advance(60)
    _cycle(loop, sim, [_dbe(first, sim.cluster.clock())])  # the incident is still open

    done = loop.engine.approve(drain.id, "bob", sim.cluster.clock())
    loop.act(sim.cluster.clock())
    assert _in_service(sim), "a stale approval cordoned a node that was returned to service"
    assert done.state is ActionState.EXPIRED
    assert done.result.startswith(f"expired on approval: node/{NODE} was returned to service")
    got = store.get_action(drain.id)
    assert got is not None and got.state is ActionState.EXPIRED


def test_a_drained_node_whose_incident_ended_is_reported_and_returned_and_a_hand_cordon_is_not(
    sim: Sim, tmp_path: Path
) -> None:
    """Every hold has an owner: a drain (no quarantine) whose incident has ended holds the node
    for nothing; the reconciler reports it once, and `diagnose_and_return` gives it back through
    the return rule. The node a person cordoned by hand is never gpufleet's to return."""
    drain_auto = {**DRAIN_ON_APPROVAL, "mode": "auto"}
    policy = live_policy_dict([drain_auto])
    policy["gates"] = {**policy["gates"], "return_quiet": "60s"}
    store = Store.open(f"sqlite:///{tmp_path / 'h.db'}", cluster="small")
    actuator = KubeActuator.from_kubeconfig(sim.kubeconfig, clock=sim.cluster.clock)
    loop = RemediationCycle(
        policy_from_dict(policy, "test-policy"), store, actuator, "svc-test",
        started_at=sim.cluster.clock() - 60,
    )  # fmt: skip
    diag = KubeNodeJobs(api_client(sim.kubeconfig))
    try:
        by_hand = sim.cluster.get("nodes", "", "h100-0002")
        sim.cluster.write("nodes", {**by_hand, "spec": {**by_hand["spec"], "unschedulable": True}})
        first = sim.cluster.clock()
        _cycle(loop, sim, [_dbe(first, first)])
        (drain,) = store.actions()
        assert drain.playbook == "drain" and drain.state is ActionState.DONE, drain
        assert _node(sim)["spec"]["unschedulable"] is True
        assert QUARANTINE_LABEL not in _node(sim)["metadata"].get("labels", {})
        assert not [r for r in store.audit_log() if r.kind == "orphan_hold"]  # owned: open
        for _ in range(4):  # repaired: the incident resolves after 3 healthy cycles
            sim.advance(30)
            _cycle(loop, sim, [])
        orphans = [r for r in store.audit_log() if r.kind == "orphan_hold"]
        assert [r.target for r in orphans] == [f"node/{NODE}"]  # reported once, not per cycle
        out = _diagnose(loop, diag, sim)
        assert out["outcomes"] == {f"node/{NODE}": "passed"}, out["nodes"]
        assert _in_service(sim), out["nodes"]
        assert sim.cluster.get("nodes", "", "h100-0002")["spec"]["unschedulable"] is True
        sim.advance(30)
        _cycle(loop, sim, [])
        assert len([r for r in store.audit_log() if r.kind == "orphan_hold"]) == 1
    finally:
        diag.close()
        actuator.close()
        store.close()


def test_a_node_that_faults_again_after_each_repair_is_marked_as_a_lemon(
    sim: Sim, tmp_path: Path
) -> None:
    """Repeat history: the node is quarantined, diagnosed and returned; its fault comes back
    soon after, twice (`lemon_repeats: 2`): the third time it is not diagnosed and returned
    again but marked for hardware replacement, and a person is told."""
    policy = live_policy_dict([QUARANTINE_CRITICAL])
    attempts = {"cooldown": "1m", "max_attempts": 5}
    policy["gates"] = {
        **policy["gates"],
        "return_quiet": "30s",
        "lemon_repeats": 2,
        "attempts": attempts,
    }
    policy["hysteresis"] = {"open_after": 1, "resolve_after": 2}
    store = Store.open(f"sqlite:///{tmp_path / 'l.db'}", cluster="small")
    actuator = KubeActuator.from_kubeconfig(sim.kubeconfig, clock=sim.cluster.clock)
    loop = RemediationCycle(
        policy_from_dict(policy, "test-policy"), store, actuator, "svc-test",
        started_at=sim.cluster.clock() - 60,
    )  # fmt: skip
    diag = KubeNodeJobs(api_client(sim.kubeconfig))
    try:
        outcomes = []
        for _ in range(3):
            first = sim.cluster.clock()
            _cycle(loop, sim, [_dbe(first, first)])
            assert not _in_service(sim)
            for _ in range(3):  # the fault is gone again: the incident resolves
                sim.advance(30)
                _cycle(loop, sim, [])
            out = _diagnose(loop, diag, sim)
            outcomes.append((_in_service(sim), dict(out["outcomes"])))
            sim.advance(120)  # back in service a little while, then the fault returns
        passed = {f"node/{NODE}": "passed"}
        assert outcomes == [(True, passed), (True, passed), (False, {})], outcomes
        labels = _node(sim)["metadata"]["labels"]
        assert REPLACEMENT_LABEL in labels and QUARANTINE_LABEL in labels
        (told,) = [r for r in store.audit_log() if r.kind == "needs_person"]
        assert "faulted again 2 times" in told.message and told.target == f"node/{NODE}"
    finally:
        diag.close()
        actuator.close()
        store.close()


def test_a_node_a_person_cordoned_gets_gpufleets_quarantine_back_and_keeps_the_cordon(
    sim: Sim, parts: tuple[RemediationCycle, KubeNodeJobs]
) -> None:
    """Found by the stateful test: a person cordons the node, then gpufleet quarantines it (its
    taint and label; the cordon is not gpufleet's). Once the fault is over and a diagnostic
    passed, gpufleet takes back its own marks and leaves the person's cordon; it used to refuse
    the whole return (ownership: not cordoned by gpufleet), so the node stayed held for ever."""
    loop, diag = parts
    n = _node(sim)
    sim.cluster.write("nodes", {**n, "spec": {**n["spec"], "unschedulable": True}})
    first = sim.cluster.clock()
    _cycle(loop, sim, [_dbe(first, first)])
    assert QUARANTINE_LABEL in _node(sim)["metadata"]["labels"]
    for _ in range(3):
        sim.advance(30)
        _cycle(loop, sim, [])
    sim.advance(QUIET)
    out = _diagnose(loop, diag, sim)
    assert out["outcomes"] == {f"node/{NODE}": "passed"}, out["nodes"]
    back = _node(sim)
    assert QUARANTINE_LABEL not in back["metadata"].get("labels", {}), out["nodes"]
    assert not [t for t in back["spec"].get("taints") or [] if t["key"].startswith("gpufleet")]
    assert back["spec"]["unschedulable"] is True  # the person's cordon stays
