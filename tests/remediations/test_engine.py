"""The engine end to end on the fake cluster: decisions, approvals, execution, gates, dry-run."""

from __future__ import annotations

from dataclasses import replace

from detectors.findings import FindingKind, Severity
from harness.fake_cluster import FakeCluster
from remediations.decision_journal import DecisionJournal, ShadowReplay
from remediations.executor import Executor
from remediations.policy import Policy
from remediations.store import Store
from remediations.types import OWNER_ANNOTATION, QUARANTINE_TAINT, ActionState, Verdict
from remediations.validation import DIAGNOSTIC, record_diagnosis
from tests.remediations.helpers import finding, live_policy

T0 = 1_700_000_000.0


def _engine(store: Store, policy: Policy | None = None) -> DecisionJournal:
    return DecisionJournal(policy or live_policy(), store, started_at=T0 - 60)


def test_default_policy_quarantines_critical_xid_and_asks_before_draining(store: Store) -> None:
    cluster = FakeCluster({"a": 10})
    cluster.add_pod("ml", "w-0", "a-0001", job="ml/train")
    eng = _engine(store)
    f = finding(node="a-0001", gpu="GPU-1", first_seen=T0, last_seen=T0)
    res = eng.cycle([f], cluster.view(T0), T0)
    by = {d.playbook: d for d in res.decisions}
    assert by["quarantine"].decision is Verdict.EXECUTE
    assert by["drain"].decision is Verdict.AWAIT_APPROVAL
    runner = Executor(eng.policy, store, cluster, owner="test")
    runner.run(cluster.view(T0), T0 + 1)
    node = cluster.nodes["a-0001"]
    assert node.unschedulable and (QUARANTINE_TAINT, "gpu_xid", "NoSchedule") in node.taints
    assert node.annotations[OWNER_ANNOTATION] == "gpufleet"
    q = next(a for a in store.actions() if a.playbook == "quarantine")
    states = {a.playbook: a.state for a in store.actions()}
    assert states == {"quarantine": ActionState.DONE, "drain": ActionState.AWAITING_APPROVAL}
    assert q.progress == len(q.plan)
    drain = next(a for a in store.actions() if a.playbook == "drain")
    eng.approve(drain.id, "alice", T0 + 2)
    runner.run(cluster.view(T0 + 2), T0 + 3)
    assert cluster.pods["ml/w-0"].node != "a-0001"
    assert store.get_action(drain.id).state is ActionState.DONE  # type: ignore[union-attr]
    kinds = [r.kind for r in store.audit_log()]
    assert "approval" in kinds and "k8s_write" in kinds and "decision" in kinds


def test_replayed_findings_create_no_second_action(store: Store) -> None:
    cluster = FakeCluster({"a": 10})
    eng = _engine(store)
    f = finding(node="a-0002", first_seen=T0, last_seen=T0)
    eng.cycle([f], cluster.view(T0), T0)
    n = len(store.actions())
    fresh = _engine(store)  # a restart: memory rebuilt from the store
    fresh.cycle([f], cluster.view(T0), T0 + 1)
    eng.cycle([f], cluster.view(T0), T0 + 2)
    assert len(store.actions()) == n


def test_stale_findings_after_restart_never_act(store: Store) -> None:
    cluster = FakeCluster({"a": 10})
    eng = DecisionJournal(live_policy(), store, started_at=T0 + 100)
    old = finding(node="a-0003", first_seen=T0, last_seen=T0)
    res = eng.cycle([old], cluster.view(T0 + 100), T0 + 100)
    assert all(d.decision is Verdict.DENY for d in res.decisions if d.playbook == "quarantine")
    assert any("replay" in r for d in res.decisions for r in d.reasons)
    assert store.actions() == [] or all(a.playbook == "drain" for a in store.actions())


def test_monitoring_gap_never_acts_and_policy_refuses_auto(store: Store) -> None:
    import pytest

    from errors import ConfigError

    with pytest.raises(ConfigError, match=r"rules\[0\].mode"):
        live_policy({"rules": [{"name": "x", "playbook": "cordon", "mode": "auto"}]})
    cluster = FakeCluster({"a": 4})
    eng = _engine(store)
    gap = finding(kind=FindingKind.MONITORING_GAP, node="a-0000", gpu=None, first_seen=T0)
    res = eng.cycle([gap], cluster.view(T0), T0)
    assert all(d.decision is Verdict.DENY for d in res.decisions)


def test_breaker_trips_on_mass_faults_and_stops_everything(store: Store) -> None:
    cluster = FakeCluster({"a": 10}, cpu_nodes=30)  # CPU nodes are not in the denominator
    eng = _engine(store)
    fs = [finding(node=f"a-{i:04d}", gpu=f"G{i}", first_seen=T0) for i in range(6)]
    res = eng.cycle(fs, cluster.view(T0), T0)
    assert res.trip is not None and "6/10 GPU nodes" in res.trip
    assert store.engine_state().breaker_tripped
    assert not any(d.decision is Verdict.EXECUTE for d in res.decisions)
    Executor(eng.policy, store, cluster, "t").run(cluster.view(T0), T0 + 1)
    assert cluster.writes == []
    store.reset_breaker("bob", T0 + 10)
    # the same (old) findings after the reset must not act (NVSentinel #450)
    res2 = eng.cycle(fs, cluster.view(T0 + 10), T0 + 10)
    assert not any(d.decision is Verdict.EXECUTE for d in res2.decisions)


def test_uncordon_only_what_we_cordoned(store: Store) -> None:
    cluster = FakeCluster({"a": 4})
    cluster.nodes["a-0001"].unschedulable = True  # a person cordoned it
    policy = live_policy(
        {
            "rules": [
                {
                    "name": "u",
                    "match": {"kinds": ["gpu_xid"]},
                    "playbook": "uncordon",
                    "mode": "auto",
                }
            ]
        }
    )
    eng = _engine(store, policy)
    res = eng.cycle([finding(node="a-0001", first_seen=T0)], cluster.view(T0), T0)
    assert res.decisions[0].decision is Verdict.DENY
    assert "not changed by gpufleet" in res.decisions[0].reasons[0]


def test_pause_blocks_auto_actions_and_execution(store: Store) -> None:
    cluster = FakeCluster({"a": 10})
    eng = _engine(store)
    store.set_paused(True, "carol", "incident review", T0 - 1)
    res = eng.cycle([finding(node="a-0004", first_seen=T0)], cluster.view(T0), T0)
    q = next(d for d in res.decisions if d.playbook == "quarantine")
    assert q.decision is Verdict.DENY and "paused by carol" in q.reasons[0]
    store.set_paused(False, "carol", "done", T0 + 1)
    res = eng.cycle(
        [finding(node="a-0004", first_seen=T0, last_seen=T0 + 30)], cluster.view(T0 + 30), T0 + 30
    )
    assert any(d.playbook == "quarantine" and d.decision is Verdict.EXECUTE for d in res.decisions)


def test_a_half_done_quarantine_of_a_faulty_node_is_kept_out_for_a_person(store: Store) -> None:
    """Undoing a quarantine that failed midway would return the node to service: it goes
    through the one return rule, which refuses while its hardware incident is open (and no
    diagnostic passed), so the node stays held and a person is told."""
    cluster = FakeCluster({"a": 10})
    cluster.fail_ops.add("label")
    eng = _engine(store)
    eng.cycle([finding(node="a-0005", first_seen=T0)], cluster.view(T0), T0)
    Executor(eng.policy, store, cluster, "t").run(cluster.view(T0), T0 + 1)
    q = next(a for a in store.actions() if a.playbook == "quarantine")
    assert q.state is ActionState.FAILED, q
    assert "not rolled back: node/a-0005: no diagnostic has passed" in q.result
    n = cluster.nodes["a-0005"]
    assert n.unschedulable and n.taints != []
    (told,) = [r for r in store.audit_log() if r.kind == "needs_person"]
    assert told.target == "node/a-0005" and told.action_id == q.id


def test_shadow_replay_engine_for_backtest() -> None:
    dr = ShadowReplay()
    cluster = FakeCluster({"a": 10})
    for i in range(3):
        t = T0 + 30 * i
        dr.step([finding(node="a-0001", first_seen=T0, last_seen=t)], cluster.view(t), t)
    dr.step([], None, T0 + 120)
    out = [d.to_json() for d in dr.decisions]
    assert {o["playbook"] for o in out} >= {"quarantine", "drain"}
    q = next(o for o in out if o["playbook"] == "quarantine")
    assert q["decision"] == "execute" and any("shadow: would" in r for r in q["reasons"])
    assert cluster.writes == []
    assert set(out[0]) == {"playbook", "target", "decided_at", "decision", "reasons"}
    dr.close()


def test_blast_radius_in_one_cycle(store: Store) -> None:
    cluster = FakeCluster({"a": 40})
    eng = _engine(store)
    fs = [finding(node=f"a-{i:04d}", gpu=f"G{i}", first_seen=T0) for i in range(5)]
    res = eng.cycle(fs, cluster.view(T0), T0)
    execs = [d for d in res.decisions if d.decision is Verdict.EXECUTE]
    assert len(execs) == 2  # max_nodes: 2
    Executor(eng.policy, store, cluster, "t").run(cluster.view(T0), T0 + 1)
    assert len(cluster.unavailable_gpu_nodes()) == 2
    assert not any(
        d.playbook == "quarantine" and d.decision is Verdict.EXECUTE
        for d in eng.cycle(fs, cluster.view(T0 + 30), T0 + 30).decisions
    )


def test_replay_episodes_gives_backtest_its_actions() -> None:
    from remediations.decision_journal import replay_episodes

    eps = [
        finding(node="a-0001", gpu="G1", first_seen=T0, last_seen=T0 + 300),
        finding(
            kind=FindingKind.GPU_IDLE,
            severity=Severity.INFO,
            node="a-0002",
            gpu="G2",
            first_seen=T0,
            last_seen=T0 + 600,
        ),
        finding(
            kind=FindingKind.MONITORING_GAP,
            node="a-0003",
            gpu=None,
            first_seen=T0 + 60,
            last_seen=T0 + 120,
        ),
    ]
    out = [d.to_json() for d in replay_episodes(eps, step=30.0)]
    by = {(o["playbook"], o["target"]): o for o in out}
    assert by[("quarantine", "node/a-0001")]["decision"] == "execute"
    assert by[("drain", "node/a-0001")]["decision"] == "await_approval"
    assert by[("cordon", "node/a-0002")]["decision"] == "deny"  # gpu_idle: notify only
    assert by[("cordon", "node/a-0003")]["decision"] == "deny"  # monitoring_gap: never acts
    assert len(out) == len(by)  # one entry per (playbook, target): no per-step repeats


def test_freshness_recheck_expires_approved_actions(store: Store) -> None:
    cluster = FakeCluster({"a": 10})
    policy = live_policy(
        {
            "hysteresis": {"open_after": 1},
            "rules": [
                {
                    "name": "c",
                    "match": {"kinds": ["gpu_xid"]},
                    "playbook": "cordon",
                    "mode": "approval",
                }
            ],
        }
    )
    eng = _engine(store, policy)
    eng.cycle([finding(node="a-0001", first_seen=T0)], cluster.view(T0), T0)
    (a,) = store.actions()
    eng.approve(a.id, "alice", T0 + 1)
    assert eng.still_needed(store.actions()[0]) is None

    def recheck(action: object) -> str:  # the caller's re-check against current data
        return "GPU healthy again in current data"

    Executor(policy, store, cluster, "t").run(cluster.view(T0 + 31), T0 + 31, recheck)
    a2 = store.get_action(a.id)
    assert a2 is not None and a2.state is ActionState.EXPIRED and "healthy again" in a2.result
    assert cluster.writes == []


def test_metrics_only_backtest_does_not_trip_the_breaker() -> None:
    from remediations.decision_journal import replay_episodes

    eps = [finding(node=f"n{i}", gpu=f"G{i}", first_seen=T0, last_seen=T0 + 60) for i in range(5)]
    out = replay_episodes(eps, step=30.0)
    assert not any("breaker" in r for d in out for r in d.reasons)
    # blast radius: without cluster data the pool is the 5 nodes seen; 10 % rounds up to 1 node
    assert sum(d.decision is Verdict.EXECUTE for d in out) == 1


def test_resolved_incident_expires_its_pending_approvals(store: Store) -> None:
    cluster = FakeCluster({"a": 10})
    policy = live_policy(
        {
            "hysteresis": {"open_after": 1, "resolve_after": 2},
            "rules": [
                {
                    "name": "d",
                    "match": {"kinds": ["gpu_xid"]},
                    "playbook": "drain",
                    "mode": "approval",
                }
            ],
        }
    )
    eng = _engine(store, policy)
    eng.cycle([finding(node="a-0001", first_seen=T0)], cluster.view(T0), T0)
    eng.cycle([], cluster.view(T0 + 30), T0 + 30)
    eng.cycle([], cluster.view(T0 + 60), T0 + 60)
    (a,) = store.actions()
    assert a.state is ActionState.EXPIRED and a.result == "expired: incident resolved"


def test_shadow_replay_sees_a_diagnosis_written_between_cycles() -> None:
    """The replay's journal remembers its audit reads; any audit row written forgets them."""
    dr = ShadowReplay()
    cluster = FakeCluster({"a": 10})
    f = finding(node="a-0001", gpu="GPU-1", first_seen=T0, last_seen=T0)
    for i in range(3):
        dr.step([replace(f, last_seen=T0 + 30 * i)], cluster.view(T0 + 30 * i), T0 + 30 * i)
    assert dr.journal.verdicts([f]) == {}
    record_diagnosis(dr.store, T0 + 100, "gpu/GPU-1", "passed", node="a-0001")
    assert dr.journal.verdicts([f]) == {"GPU-1": T0 + 100}
    row = {"at": T0 + 200, "kind": DIAGNOSTIC, "target": "node/a-0001", "actor": "ops",
           "message": "waived", "detail": {"outcome": "waived"}}  # fmt: skip
    dr.store.insert_audit_rows([row])
    assert dr.journal.verdicts([f]) == {"GPU-1": T0 + 200}
    dr.close()
