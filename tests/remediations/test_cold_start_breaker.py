"""Thin evidence never acts (issue 11): findings present before gpufleet started watching at
most await approval, and the circuit breaker counts hardware faults only."""

from __future__ import annotations

from detectors.findings import FindingKind, Severity
from harness.fake_cluster import FakeCluster
from remediations.decision_journal import DecisionJournal
from remediations.decisions import COLD_START
from remediations.executor import Executor
from remediations.store import Store
from remediations.types import ActionState, Verdict
from tests.remediations.helpers import finding, live_policy

T0 = 1_700_000_000.0


def test_pre_existing_evidence_awaits_approval_with_the_reason(store: Store) -> None:
    cluster = FakeCluster({"a": 40})
    eng = DecisionJournal(live_policy(), store, started_at=T0 - 60)
    runner = Executor(eng.policy, store, cluster, owner="t", open_incidents=eng.open_incident_ids)
    old = finding(node="a-0001", gpu="G1", first_seen=T0, pre_existing=True)
    new = finding(node="a-0002", gpu="G2", first_seen=T0)
    for i in range(3):
        t = T0 + 30 * i
        cold = finding(node="a-0001", gpu="G1", first_seen=T0, last_seen=t, pre_existing=True)
        res = eng.cycle([cold, finding(node="a-0002", gpu="G2", first_seen=T0, last_seen=t)],
                        cluster.view(t), t)  # fmt: skip
        if i == 0:
            by = {(d.playbook, d.target): d for d in res.decisions}
            q_old = by[("quarantine", f"node/{old.node}")]
            assert q_old.decision is Verdict.AWAIT_APPROVAL and COLD_START in q_old.reasons
            assert by[("quarantine", f"node/{new.node}")].decision is Verdict.EXECUTE
        runner.run(cluster.view(t), t + 1, fresh=eng.still_needed)
    assert not cluster.nodes["a-0001"].unschedulable  # nothing automatic on old evidence
    assert cluster.nodes["a-0002"].unschedulable  # evidence seen while watching: acts
    q = next(a for a in store.actions() if a.playbook == "quarantine" and a.target.endswith("1"))
    assert q.state is ActionState.AWAITING_APPROVAL and COLD_START in q.reasons
    decision_rows = [r for r in store.audit_log() if r.action_id == q.id]
    assert COLD_START in decision_rows[0].detail["reasons"]  # the journal says why
    eng.approve(q.id, "alice", T0 + 100)  # a person may still say yes
    runner.run(cluster.view(T0 + 100), T0 + 101, fresh=eng.still_needed)
    assert cluster.nodes["a-0001"].unschedulable


def test_many_long_idle_gpus_never_trip_the_breaker(store: Store) -> None:
    cluster = FakeCluster({"a": 10})
    eng = DecisionJournal(live_policy(), store, started_at=T0 - 60)
    for i in range(40):  # 20 minutes of every GPU node idle (and throttled, and lagging)
        t = T0 + 30 * i
        findings = [
            finding(FindingKind.GPU_IDLE, Severity.WARNING, node=f"a-{n:04d}", gpu=f"G{n}",
                    first_seen=T0, last_seen=t)
            for n in range(10)
        ] + [
            finding(FindingKind.GPU_THROTTLE, Severity.WARNING, node=f"a-{n:04d}", gpu=f"G{n}",
                    first_seen=T0, last_seen=t)
            for n in range(6)
        ]  # fmt: skip
        res = eng.cycle(findings, cluster.view(t), t)
        assert res.trip is None
    assert not store.engine_state().breaker_tripped
    # hardware faults on as many nodes still trip it
    t = T0 + 30 * 41
    xids = [finding(node=f"a-{n:04d}", gpu=f"G{n}", first_seen=t) for n in range(6)]
    assert eng.cycle(xids, cluster.view(t), t).trip is not None


def test_pre_existing_faults_do_not_trip_the_breaker(store: Store) -> None:
    cluster = FakeCluster({"a": 10})
    eng = DecisionJournal(live_policy(), store, started_at=T0 - 60)
    held = [finding(node=f"a-{n:04d}", gpu=f"G{n}", first_seen=T0, pre_existing=True)
            for n in range(8)]  # fmt: skip
    assert eng.cycle(held, cluster.view(T0), T0).trip is None


def _quarantine_verdict(eng: DecisionJournal, cluster: FakeCluster, t: float, node: str) -> Verdict:
    f = finding(node=node, gpu="G9", first_seen=t, last_seen=t, pre_existing=True)
    res = eng.cycle([f], cluster.view(t), t)
    (d,) = [d for d in res.decisions if d.playbook == "quarantine"]
    return d.decision


def test_cold_start_is_judged_on_the_fleets_clock_not_the_process(store: Store) -> None:
    """ "Present before gpufleet started watching" means before any replica first watched the
    fleet, as the journal records it: a fresh install's first look is cold start; a process
    that starts (or takes over) on a fleet watched before, and sees a fault at its first look
    that no incident knew, saw it begin while the fleet was watched; an incident the journal
    already holds as pre-existing stays so across a restart."""
    cluster = FakeCluster({"a": 40})
    first = DecisionJournal(live_policy(), store, started_at=T0 - 60)
    assert first.first_look(T0, "one") is False  # a fresh install: the fleet's first watch
    assert _quarantine_verdict(first, cluster, T0, "a-0001") is Verdict.AWAIT_APPROVAL

    later = T0 + 3600  # a new process (restart, or a standby started late) looks first now
    second = DecisionJournal(live_policy(), store, started_at=later - 60)
    assert second.first_look(later, "two") is True
    assert _quarantine_verdict(second, cluster, later, "a-0002") is Verdict.EXECUTE
    held = [t for t in second.open_incidents() if t.node == "a-0001"]
    assert held and held[0].pre_existing  # the first process's cold start stays cold
    f = finding(node="a-0001", gpu="G9", first_seen=later, last_seen=later + 30, pre_existing=True)
    second.cycle([f], cluster.view(later + 30), later + 30)
    q = [a for a in store.actions() if a.playbook == "quarantine" and a.target == "node/a-0001"]
    assert [a.state for a in q] == [ActionState.AWAITING_APPROVAL]
