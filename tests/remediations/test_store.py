"""The journal on SQLite and PostgreSQL: migrations, idempotency, optimistic concurrency, audit."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import text

from remediations.store import NewAction, Store, TransitionRefused
from remediations.types import ActionState, IncidentId, Intent, Mode, Verdict


def _new(key: str = "k1", state: ActionState = ActionState.APPROVED) -> NewAction:
    return NewAction(
        idempotency_key=key,
        incident_id=IncidentId("inc1"),
        playbook="cordon",
        target="node/n1",
        target_nodes=("n1",),
        disruptive=True,
        mode=Mode.AUTO,
        rule="r",
        state=state,
        decision=Verdict.EXECUTE,
        reasons=("ok",),
        params={},
        plan=(Intent("cordon", "n1"),),
        dry_run=False,
        attempt=1,
    )


def test_migrations_are_idempotent(store_url: str) -> None:
    Store.open(store_url).close()
    Store.open(store_url).close()


def test_replayed_key_creates_one_action(store: Store) -> None:
    a, created = store.propose(_new(), now=10.0)
    b, created2 = store.propose(_new(), now=20.0)
    assert created and not created2
    assert a.id == b.id
    assert len(store.actions()) == 1
    assert b.plan == (Intent("cordon", "n1"),)


def test_clusters_are_separate(store_url: str) -> None:
    one, two = Store.open(store_url, "one"), Store.open(store_url, "two")
    one.propose(_new(), 1.0)
    two.propose(_new(), 1.0)
    assert len(one.actions()) == 1 and len(two.actions()) == 1
    assert one.actions()[0].id != two.actions()[0].id


def test_stale_version_loses(store: Store) -> None:
    a, _ = store.propose(_new(), now=1.0)
    won = store.update_action(a, 2.0, state=ActionState.EXECUTING)
    lost = store.update_action(a, 2.0, state=ActionState.EXECUTING)
    assert won is not None and won.state is ActionState.EXECUTING and won.version == 2
    assert lost is None


def test_illegal_transition_refused(store: Store) -> None:
    a, _ = store.propose(_new(), now=1.0)
    with pytest.raises(TransitionRefused):
        store.update_action(a, 2.0, state=ActionState.DONE)


def test_threads_race_for_one_step(store: Store) -> None:
    a, _ = store.propose(_new(), now=1.0)
    wins: list[bool] = []

    def claim() -> None:
        wins.append(store.update_action(a, 2.0, state=ActionState.EXECUTING) is not None)

    threads = [threading.Thread(target=claim) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wins.count(True) == 1


def test_audit_is_append_only(store: Store) -> None:
    store.propose(_new(), now=1.0)
    store.set_paused(True, "alice", "maintenance", 2.0)
    log = store.audit_log()
    assert [r.kind for r in log] == ["decision", "control"]
    assert log[1].actor == "alice"
    with store.engine.begin() as conn, pytest.raises(Exception, match="append-only"):
        conn.execute(text("UPDATE audit SET message = 'x'"))
    with store.engine.begin() as conn, pytest.raises(Exception, match="append-only"):
        conn.execute(text("DELETE FROM audit"))
    assert len(store.audit_log(since=2.0)) == 1


def test_breaker_trip_expires_unstarted_actions(store: Store) -> None:
    store.propose(_new("a", ActionState.AWAITING_APPROVAL), 1.0)
    running, _ = store.propose(_new("b"), 1.0)
    running2 = store.update_action(running, 1.5, state=ActionState.EXECUTING)
    assert running2 is not None
    assert store.trip_breaker("60% of GPU nodes", 2.0)
    assert not store.trip_breaker("again", 3.0)
    st = store.engine_state()
    assert st.breaker_tripped and st.breaker_tripped_at == 2.0
    states = {a.idempotency_key: a.state for a in store.actions()}
    assert states == {"a": ActionState.EXPIRED, "b": ActionState.EXECUTING}
    assert store.reset_breaker("bob", 4.0)
    assert not store.engine_state().breaker_tripped


def test_claim_serialises_starts_on_the_engine_state(store: Store) -> None:
    a, _ = store.propose(_new("a"), 1.0)
    b, _ = store.propose(_new("b"), 1.0)
    v = store.ensure_state().version
    won = store.claim(a, v, 2.0, "r1", 100.0)
    assert won is not None and won.state is ActionState.EXECUTING and won.started_at == 2.0
    assert store.claim(b, v, 2.0, "r2", 100.0) is None  # a start happened since v was read
    store.set_paused(True, "ops", "x", 3.0)
    assert store.claim(b, v + 1, 3.0, "r2", 100.0) is None  # and so did a pause
    later = store.claim(b, store.engine_state().version, 4.0, "r2", 100.0)
    assert later is not None and later.lease_owner == "r2"
