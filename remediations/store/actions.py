"""The action journal: idempotent proposals and version-checked transitions.

Every action transition is one transaction that names the version it read
(`UPDATE ... WHERE id = :id AND version = :v`), so of two processes racing for the same step only
one wins; the audit row for the move is written in that same transaction. Actions carry an
idempotency key (unique per cluster), so a replayed finding never journals a second action.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from database.tables.journal import ActionRow, AuditRow, IncidentRow
from detectors.findings import INTAKE_DETECTOR
from remediations.store.base import StoreBase
from remediations.store.convert import action_record
from remediations.store.records import (
    ActionBrief,
    ActionRecord,
    NewAction,
)
from remediations.types import (
    ACTOR,
    ActionId,
    ActionState,
    IncidentId,
    Verdict,
    can_transition,
)
from remediations.types import action_id as _action_id


def _decision_message(r: Mapping[str, Any]) -> str:
    """A new action's audit line; a shadow one says what would have happened (its result)."""
    if r["state"] == ActionState.SHADOW.value and r["result"]:
        return str(r["result"])
    return f"{r['playbook']} on {r['target']}: {r['decision']}"


def _action_values(cluster: str, n: NewAction, now: float) -> dict[str, Any]:
    """A new action's row as column values: version 1, no step taken, created `now`."""
    return {
        "id": _action_id(cluster, n.idempotency_key),
        "cluster": cluster,
        "idempotency_key": n.idempotency_key,
        "incident_id": n.incident_id,
        "playbook": n.playbook,
        "target": n.target,
        "target_nodes": list(n.target_nodes),
        "disruptive": n.disruptive,
        "mode": n.mode.value,
        "rule": n.rule,
        "state": n.state.value,
        "version": 1,
        "decision": n.decision.value,
        "reasons": list(n.reasons),
        "params": dict(n.params),
        "plan": [i.to_json() for i in n.plan],
        "progress": 0,
        "step_started": None,
        "shadow": n.shadow,
        "attempt": n.attempt,
        "created_at": now,
        "updated_at": now,
        "result": n.result,
        "phase": "run",
        "deadline": n.deadline,
    }


_UNCLAIMED = {"approved_by": None, "lease_owner": None, "lease_until": None, "started_at": None}
"""The columns a bulk insert must name that a new action leaves empty."""


def _decision_detail(r: Mapping[str, Any]) -> dict[str, Any]:
    """The decision audit row's detail: why, under which mode and rule, into which state."""
    return {
        "reasons": list(r["reasons"]),
        "mode": r["mode"],
        "rule": r["rule"],
        "state": r["state"],
        "shadow": r["shadow"],
    }


def _decision_audits(
    cluster: str,
    now: float,
    fresh: Sequence[Mapping[str, Any]],
    denials: Sequence[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """Audit rows for a cycle: one per newly journaled action, then the cycle's denials."""
    audits: list[dict[str, Any]] = [
        {
            "cluster": cluster,
            "at": now,
            "actor": ACTOR,
            "kind": "decision",
            "action_id": r["id"],
            "incident_id": r["incident_id"],
            "target": r["target"],
            "message": _decision_message(r),
            "detail": _decision_detail(r),
        }
        for r in fresh
    ]
    audits += [
        {
            "cluster": cluster,
            "at": now,
            "actor": ACTOR,
            "kind": "decision",
            "action_id": None,
            "target": "",
            "message": "",
            "incident_id": None,
            "detail": {},
            **d,
        }
        for d in denials
    ]
    return audits


def _journaled_ids(conn: Connection, ids: Sequence[str]) -> set[str]:
    """Which of these action ids the journal holds already (queried 500 at a time)."""
    existing: set[str] = set()
    for i in range(0, len(ids), 500):
        existing.update(
            conn.scalars(select(ActionRow.id).where(ActionRow.id.in_(ids[i : i + 500])))
        )
    return existing


class TransitionRefused(Exception):
    """The state machine does not allow the move (a bug in the caller, not a race)."""


class ActionStore(StoreBase):
    # ---- actions -----------------------------------------------------------------------------

    def propose(self, new: NewAction, now: float) -> tuple[ActionRecord, bool]:
        """Journal a new action, or return the one already journaled under its key."""
        values = _action_values(self.cluster, new, now)
        action_id = values["id"]
        row = ActionRow(**values)
        try:
            with Session(self.engine, expire_on_commit=False) as s, s.begin():
                s.add(row)
                s.flush()
                self._audit_row(
                    s,
                    now,
                    "decision",
                    _decision_message(values),
                    action_id=action_id,
                    incident_id=new.incident_id,
                    target=new.target,
                    detail=_decision_detail(values),
                )
            return action_record(row), True
        except IntegrityError:
            existing = self.get_action(action_id)
            if existing is None:
                raise
            return existing, False

    def propose_many(
        self, news: Sequence[NewAction], now: float, denials: Sequence[Mapping[str, Any]] = ()
    ) -> int:
        """Journal a cycle's actions (keys already journaled are skipped) and its deny audit
        rows in one transaction. Returns how many actions were new."""
        if not news and not denials:
            return 0
        rows = [_action_values(self.cluster, n, now) | _UNCLAIMED for n in news]
        mod: Any = postgresql if self.engine.dialect.name == "postgresql" else sqlite
        with self.engine.begin() as conn:
            existing = _journaled_ids(conn, [r["id"] for r in rows])
            fresh = [r for r in rows if r["id"] not in existing]
            if fresh:
                conn.execute(mod.insert(ActionRow.__table__).on_conflict_do_nothing(), fresh)
            audits = _decision_audits(self.cluster, now, fresh, denials)
            if audits:
                conn.execute(insert(AuditRow), audits)
            return len(fresh)

    def get_action(self, action_id: str) -> ActionRecord | None:
        with Session(self.engine) as s:
            row = s.get(ActionRow, action_id)
            return action_record(row) if row is not None else None

    def find_actions(self, prefix: str) -> list[ActionRecord]:
        q = select(ActionRow).where(
            ActionRow.cluster == self.cluster, ActionRow.id.startswith(prefix)
        )
        with Session(self.engine) as s:
            return [action_record(r) for r in s.scalars(q)]

    def actions(
        self,
        states: Sequence[ActionState] | None = None,
        since: float | None = None,
        target: str | None = None,
    ) -> list[ActionRecord]:
        q = select(ActionRow).where(ActionRow.cluster == self.cluster)
        if states is not None:
            q = q.where(ActionRow.state.in_([s.value for s in states]))
        if since is not None:
            q = q.where(ActionRow.updated_at >= since)
        if target is not None:
            q = q.where(ActionRow.target == target)
        with Session(self.engine) as s:
            return [
                action_record(r) for r in s.scalars(q.order_by(ActionRow.created_at, ActionRow.id))
            ]

    def briefs(self, since: float) -> list[ActionBrief]:
        """Every action updated since `since` or not yet terminal, as light records."""
        active = [s.value for s in ActionState if not s.terminal]
        cols = (
            ActionRow.id,
            ActionRow.incident_id,
            ActionRow.playbook,
            ActionRow.target,
            ActionRow.target_nodes,
            ActionRow.disruptive,
            ActionRow.state,
            ActionRow.shadow,
            ActionRow.created_at,
            ActionRow.attempt,
            ActionRow.started_at,
            ActionRow.decision,
            ActionRow.deadline,
            IncidentRow.evidence,
            ActionRow.updated_at,
        )
        q = (
            select(*cols)
            .outerjoin(IncidentRow, IncidentRow.id == ActionRow.incident_id)
            .where(
                ActionRow.cluster == self.cluster,
                (ActionRow.updated_at >= since) | ActionRow.state.in_(active),
            )
        )
        with self.engine.connect() as conn:
            return [
                ActionBrief(
                    ActionId(r[0]),
                    IncidentId(r[1]),
                    r[2],
                    r[3],
                    tuple(r[4] or ()),
                    bool(r[5]),
                    ActionState(r[6]),
                    bool(r[7]),
                    r[8],
                    r[9],
                    r[10],
                    Verdict(r[11]),
                    r[12],
                    (r[13] or {}).get("source") == INTAKE_DETECTOR,
                    r[14],
                )
                for r in conn.execute(q)
            ]

    def due(self, now: float) -> list[ActionRecord]:
        """Actions awaiting approval (or approved, not started) whose deadline has passed."""
        q = select(ActionRow).where(
            ActionRow.cluster == self.cluster,
            ActionRow.state.in_([ActionState.AWAITING_APPROVAL.value, ActionState.APPROVED.value]),
            ActionRow.deadline <= now,
        )
        with Session(self.engine) as s:
            return [action_record(r) for r in s.scalars(q)]

    def active_actions(self) -> list[ActionRecord]:
        return self.actions([s for s in ActionState if not s.terminal])

    def renew_lease(
        self, action: ActionRecord, now: float, owner: str, lease_until: float
    ) -> ActionRecord | None:
        """Extend `owner`'s claim on `action` (as read, at its version) while it runs. No audit
        row: a renewal changes nothing but the lease. None when the action moved meanwhile or
        is not `owner`'s: the caller has lost its claim and must stop."""
        with Session(self.engine, expire_on_commit=False) as s, s.begin():
            res: Any = s.execute(
                update(ActionRow)
                .where(
                    ActionRow.id == action.id,
                    ActionRow.version == action.version,
                    ActionRow.lease_owner == owner,
                )
                .values(lease_until=lease_until, version=action.version + 1, updated_at=now)
            )
            if res.rowcount != 1:
                return None
            row = s.get(ActionRow, action.id, populate_existing=True)
            assert row is not None
            return action_record(row)

    def update_action(
        self,
        action: ActionRecord,
        now: float,
        *,
        state: ActionState | None = None,
        actor: str = ACTOR,
        audit_kind: str = "transition",
        message: str = "",
        detail: Mapping[str, Any] | None = None,
        **fields: Any,
    ) -> ActionRecord | None:
        """Move `action` (as read, at its version) to `state` and/or set fields, in one
        transaction with its audit row. Returns the new record, or None if another process
        moved it first (the caller re-reads and decides again)."""
        if state is not None and state != action.state:
            if not can_transition(action.state, state):
                raise TransitionRefused(f"{action.id}: {action.state} -> {state}")
            fields["state"] = state.value
        values = {**fields, "version": action.version + 1, "updated_at": now}
        with Session(self.engine) as s, s.begin():
            res: Any = s.execute(
                update(ActionRow)
                .where(ActionRow.id == action.id, ActionRow.version == action.version)
                .values(**values)
            )
            if res.rowcount != 1:
                return None
            text = message or (
                f"{action.state.value} -> {state.value}" if state is not None else "updated"
            )
            self._audit_row(
                s,
                now,
                audit_kind,
                text,
                actor=actor,
                action_id=action.id,
                incident_id=action.incident_id,
                target=action.target,
                detail=detail,
            )
            row = s.get(ActionRow, action.id, populate_existing=True)
            assert row is not None
            return action_record(row)
