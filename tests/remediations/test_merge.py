"""One action per (playbook, target) at a time: incidents of different kinds on one node share it.

One bad GPU raises `gpu_xid` and `gpu_memory` findings on the same node; the engine tracks them as
two incidents, but the node must get one quarantine and one drain approval, the second incident
joins the first's actions (said in its decision reasons and in the audit log), and resolving the
first incident must not expire an action the second still needs.
"""

from __future__ import annotations

from detectors.findings import Finding, FindingKind
from harness.fake_cluster import FakeCluster
from remediations.decision_journal import DecisionJournal, ShadowReplay
from remediations.executor import Executor
from remediations.store import Store
from remediations.types import ActionState, Verdict
from tests.remediations.helpers import finding, live_policy

T0 = 1_700_000_000.0
NODE = "a-0001"


def _pair(t: float, first: float = T0) -> list:  # type: ignore[type-arg]
    xid = finding(FindingKind.GPU_XID, node=NODE, gpu="GPU-1", first_seen=first, last_seen=t)
    mem = finding(FindingKind.GPU_MEMORY, node=NODE, gpu="GPU-1", first_seen=first, last_seen=t)
    return [xid, mem]


def _setup(store: Store) -> tuple[FakeCluster, DecisionJournal]:
    cluster = FakeCluster({"a": 10})
    cluster.add_pod("ml", "w-0", NODE, job="ml/train")
    return cluster, DecisionJournal(live_policy(), store, started_at=T0 - 60)


def test_two_kinds_on_one_node_share_one_quarantine_and_one_drain(store: Store) -> None:
    cluster, eng = _setup(store)
    res = eng.cycle(_pair(T0), cluster.view(T0), T0)
    actions = store.actions()
    assert sorted(a.playbook for a in actions) == ["drain", "quarantine"]
    merged = [d for d in res.decisions if d.merged_into is not None]
    assert sorted(d.playbook for d in merged) == ["drain", "quarantine"]
    by_playbook = {a.playbook: a for a in actions}
    for d in merged:
        owner = by_playbook[d.playbook]
        assert d.merged_into == owner.id and d.incident_id != owner.incident_id
        assert d.decision is Verdict.DENY
        assert (
            f"already pending as action {owner.id} for incident {owner.incident_id}"
            in (d.reasons[0])
        )
    merges = [r for r in store.audit_log() if r.kind == "merge"]
    assert sorted(r.action_id or "" for r in merges) == sorted(a.id for a in actions)

    runner = Executor(eng.policy, store, cluster, owner="t", open_incidents=eng.open_incident_ids)
    runner.run(cluster.view(T0), T0 + 1, fresh=eng.still_needed)
    # later cycles: no second action, no repeated merge report, no cooldown denial
    for i in range(1, 4):
        t = T0 + 30 * i
        res = eng.cycle(_pair(t), cluster.view(t), t)
        assert not [d for d in res.decisions if d.playbook == "quarantine"]
        runner.run(cluster.view(t), t + 1, fresh=eng.still_needed)
    assert len(store.actions()) == 2
    assert len([r for r in store.audit_log() if r.kind == "merge"]) == 2

    drain = by_playbook["drain"]
    assert store.get_action(drain.id).state is ActionState.AWAITING_APPROVAL  # type: ignore[union-attr]
    eng.approve(drain.id, "alice", T0 + 200)
    eng.cycle(_pair(T0 + 210), cluster.view(T0 + 210), T0 + 210)
    runner.run(cluster.view(T0 + 210), T0 + 211, fresh=eng.still_needed)
    assert store.get_action(drain.id).state is ActionState.DONE  # type: ignore[union-attr]
    assert cluster.pods["ml/w-0"].node != NODE
    evictions = [w for w in cluster.writes if "evict" in str(w)]
    assert len(evictions) == 1
    # the done drain covered both incidents: nothing is proposed again
    for i in range(8, 14):
        t = T0 + 30 * i
        eng.cycle(_pair(t), cluster.view(t), t)
    assert len(store.actions()) == 2


def test_resolving_one_incident_keeps_the_action_the_other_needs(store: Store) -> None:
    cluster, eng = _setup(store)
    eng.cycle(_pair(T0), cluster.view(T0), T0)
    drain = next(a for a in store.actions() if a.playbook == "drain")
    owner_kind = (
        FindingKind.GPU_XID
        if store.get_incident(drain.incident_id).kind == "gpu_xid"  # type: ignore[union-attr]
        else FindingKind.GPU_MEMORY
    )
    other = next(f for f in _pair(T0) if f.kind is not owner_kind)
    for i in range(1, 6):  # only the other incident's finding persists: the owner resolves
        t = T0 + 30 * i
        eng.cycle([_with(other, t)], cluster.view(t), t)
    assert str(drain.incident_id) not in eng.open_incident_ids()
    assert store.get_action(drain.id).state is ActionState.AWAITING_APPROVAL  # type: ignore[union-attr]
    assert eng.still_needed(store.get_action(drain.id)) is None  # type: ignore[arg-type]
    for i in range(6, 11):  # now the other resolves too: the action is expired
        t = T0 + 30 * i
        eng.cycle([], cluster.view(t), t)
    assert store.get_action(drain.id).state is ActionState.EXPIRED  # type: ignore[union-attr]
    assert len([a for a in store.actions() if a.playbook == "drain"]) == 1


def _with(f: Finding, t: float) -> Finding:
    from dataclasses import replace

    return replace(f, last_seen=t)


def test_dry_run_backtest_reports_one_drain_approval_per_node() -> None:
    cluster = FakeCluster({"a": 10})
    dr = ShadowReplay(live_policy(), started_at=T0 - 60)
    for i in range(3):
        t = T0 + 30 * i
        dr.step(_pair(t), cluster.view(t), t)
    out = [d.to_json() for d in dr.decisions]
    asks = [o for o in out if o["playbook"] == "drain" and o["decision"] == "await_approval"]
    runs = [o for o in out if o["playbook"] == "quarantine" and o["decision"] == "execute"]
    assert len(asks) == 1 and len(runs) == 1
    assert any(any("merged:" in r for r in o["reasons"]) for o in out)
    dr.close()


def test_a_rejected_shared_drain_is_not_asked_for_again(store: Store) -> None:
    cluster, eng = _setup(store)
    eng.cycle(_pair(T0), cluster.view(T0), T0)
    drain = next(a for a in store.actions() if a.playbook == "drain")
    eng.reject(drain.id, "alice", T0 + 10, "not this node")
    for i in range(1, 8):
        t = T0 + 30 * i
        res = eng.cycle(_pair(t), cluster.view(t), t)
        assert not [d for d in res.decisions if d.playbook == "drain"]
    assert [a.id for a in store.actions() if a.playbook == "drain"] == [drain.id]
