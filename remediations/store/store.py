"""The journal: incidents, actions as persisted state machines, the append-only audit log.

Every action transition is one transaction that names the version it read
(`UPDATE ... WHERE id = :id AND version = :v`), so of two processes racing for the same step only
one wins; the audit row for the move is written in that same transaction. Actions carry an
idempotency key (unique per cluster), so a replayed finding never journals a second action.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Engine, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from remediations.store.migrate import make_engine, upgrade
from remediations.store.records import (
    ActionBrief,
    ActionRecord,
    AuditRecord,
    EngineState,
    IncidentRecord,
    NewAction,
)
from remediations.store.schema import ActionRow, AuditRow, EngineStateRow, IncidentRow
from remediations.types import (
    ACTOR,
    ActionId,
    ActionState,
    IncidentId,
    IncidentStatus,
    Intent,
    Mode,
    Verdict,
    can_transition,
    stable_id,
)


class TransitionRefused(Exception):
    """The state machine does not allow the move (a bug in the caller, not a race)."""


def _action(row: ActionRow) -> ActionRecord:
    return ActionRecord(
        id=ActionId(row.id),
        cluster=row.cluster,
        idempotency_key=row.idempotency_key,
        incident_id=IncidentId(row.incident_id),
        playbook=row.playbook,
        target=row.target,
        target_nodes=tuple(row.target_nodes or ()),
        disruptive=bool(row.disruptive),
        mode=Mode(row.mode),
        rule=row.rule,
        state=ActionState(row.state),
        version=row.version,
        decision=Verdict(row.decision),
        reasons=tuple(row.reasons or ()),
        params=dict(row.params or {}),
        plan=tuple(Intent.from_json(i) for i in row.plan or ()),
        progress=row.progress,
        step_started=row.step_started,
        dry_run=bool(row.dry_run),
        attempt=row.attempt,
        created_at=row.created_at,
        updated_at=row.updated_at,
        approved_by=row.approved_by,
        lease_owner=row.lease_owner,
        lease_until=row.lease_until,
        result=row.result,
        started_at=row.started_at,
        phase=row.phase,
        deadline=row.deadline,
    )


def _incident(row: IncidentRow) -> IncidentRecord:
    return IncidentRecord(
        id=IncidentId(row.id),
        cluster=row.cluster,
        kind=row.kind,
        entity_key=row.entity_key,
        node=row.node,
        gpu_uuid=row.gpu_uuid,
        job=row.job,
        status=IncidentStatus(row.status),
        severity=row.severity,
        summary=row.summary,
        opened_at=row.opened_at,
        updated_at=row.updated_at,
        resolved_at=row.resolved_at,
        first_seen=row.first_seen,
        last_seen=row.last_seen,
        seen_cycles=row.seen_cycles,
        healthy_cycles=row.healthy_cycles,
        evidence=dict(row.evidence or {}),
        last_decision=row.last_decision,
    )


def _audit(row: AuditRow) -> AuditRecord:
    return AuditRecord(
        id=row.id,
        cluster=row.cluster,
        at=row.at,
        actor=row.actor,
        kind=row.kind,
        action_id=row.action_id,
        incident_id=row.incident_id,
        target=row.target,
        message=row.message,
        detail=dict(row.detail or {}),
    )


class Store:
    """One cluster's view of the journal database (many clusters may share one PostgreSQL)."""

    def __init__(self, engine: Engine, cluster: str = "default") -> None:
        self.engine = engine
        self.cluster = cluster

    @classmethod
    def open(cls, url: str, cluster: str = "default", migrate: bool = True) -> Store:
        engine = make_engine(url)
        if migrate:
            upgrade(engine)
        return cls(engine, cluster)

    def close(self) -> None:
        self.engine.dispose()

    # ---- audit -------------------------------------------------------------------------------

    def _audit_row(
        self,
        s: Session,
        now: float,
        kind: str,
        message: str,
        actor: str = ACTOR,
        action_id: str | None = None,
        incident_id: str | None = None,
        target: str = "",
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        s.add(
            AuditRow(
                cluster=self.cluster,
                at=now,
                actor=actor,
                kind=kind,
                action_id=action_id,
                incident_id=incident_id,
                target=target,
                message=message,
                detail=dict(detail or {}),
            )
        )

    def audit(self, now: float, kind: str, message: str, **fields: Any) -> None:
        """Append one audit row in its own transaction."""
        with Session(self.engine) as s, s.begin():
            self._audit_row(s, now, kind, message, **fields)

    def audit_log(self, since: float | None = None, limit: int | None = None) -> list[AuditRecord]:
        q = select(AuditRow).where(AuditRow.cluster == self.cluster)
        if since is not None:
            q = q.where(AuditRow.at >= since)
        q = q.order_by(AuditRow.id)
        if limit is not None:
            q = q.limit(limit)
        with Session(self.engine) as s:
            return [_audit(r) for r in s.scalars(q)]

    # ---- engine state ------------------------------------------------------------------------

    def _state_row(self, s: Session) -> EngineStateRow:
        row = s.get(EngineStateRow, self.cluster, with_for_update=True)
        if row is None:
            try:
                with s.begin_nested():
                    s.add(EngineStateRow(cluster=self.cluster))
            except IntegrityError:
                pass
            row = s.get(EngineStateRow, self.cluster, with_for_update=True, populate_existing=True)
            assert row is not None
        return row

    def engine_state(self) -> EngineState:
        with Session(self.engine) as s:
            row = s.get(EngineStateRow, self.cluster)
            if row is None:
                return EngineState(self.cluster)
            return EngineState(
                cluster=row.cluster,
                paused=bool(row.paused),
                paused_by=row.paused_by,
                paused_reason=row.paused_reason,
                breaker_tripped=bool(row.breaker_tripped),
                breaker_tripped_at=row.breaker_tripped_at,
                breaker_reason=row.breaker_reason,
                breaker_reset_at=row.breaker_reset_at,
                breaker_reset_by=row.breaker_reset_by,
                version=row.version,
            )

    def ensure_state(self) -> EngineState:
        """Create this cluster's engine-state row if missing; return the state."""
        with Session(self.engine) as s, s.begin():
            self._state_row(s)
        return self.engine_state()

    def claim(
        self, action: ActionRecord, state_version: int, now: float, owner: str, lease_until: float
    ) -> ActionRecord | None:
        """Start an approved action: `approved -> executing` only if neither the action nor the
        engine state (pause, breaker, other starts) moved since the caller ran the gates on them.
        Serialises starts across processes, so two runners cannot both pass the blast-radius or
        rate gate on the same budget."""
        with Session(self.engine) as s, s.begin():
            res: Any = s.execute(
                update(EngineStateRow)
                .where(
                    EngineStateRow.cluster == self.cluster,
                    EngineStateRow.version == state_version,
                )
                .values(version=EngineStateRow.version + 1)
            )
            if res.rowcount != 1:
                return None
            res = s.execute(
                update(ActionRow)
                .where(
                    ActionRow.id == action.id,
                    ActionRow.version == action.version,
                    ActionRow.state == ActionState.APPROVED.value,
                )
                .values(
                    state=ActionState.EXECUTING.value,
                    version=action.version + 1,
                    updated_at=now,
                    started_at=now,
                    lease_owner=owner,
                    lease_until=lease_until,
                )
            )
            if res.rowcount != 1:
                s.rollback()
                return None
            self._audit_row(
                s,
                now,
                "transition",
                f"approved -> executing (claimed by {owner})",
                action_id=action.id,
                incident_id=action.incident_id,
                target=action.target,
            )
            row = s.get(ActionRow, action.id, populate_existing=True)
            assert row is not None
            return _action(row)

    def set_paused(self, paused: bool, actor: str, reason: str, now: float) -> None:
        with Session(self.engine) as s, s.begin():
            row = self._state_row(s)
            row.paused, row.paused_by, row.paused_reason = paused, actor, reason
            row.version += 1
            what = "paused" if paused else "resumed"
            self._audit_row(s, now, "control", f"automation {what}: {reason}", actor=actor)

    def trip_breaker(self, reason: str, now: float) -> bool:
        """Trip the breaker (no-op if tripped); expire every action not yet started."""
        with Session(self.engine) as s, s.begin():
            row = self._state_row(s)
            if row.breaker_tripped:
                return False
            row.breaker_tripped, row.breaker_tripped_at, row.breaker_reason = True, now, reason
            row.version += 1
            self._audit_row(s, now, "breaker", f"circuit breaker tripped: {reason}")
            pending = s.scalars(
                select(ActionRow).where(
                    ActionRow.cluster == self.cluster,
                    ActionRow.state.in_(
                        [ActionState.PROPOSED, ActionState.AWAITING_APPROVAL, ActionState.APPROVED]
                    ),
                )
            ).all()
            for a in pending:
                self._audit_row(
                    s,
                    now,
                    "transition",
                    f"{a.state} -> expired (breaker tripped)",
                    action_id=a.id,
                    incident_id=a.incident_id,
                    target=a.target,
                )
                a.state, a.version, a.updated_at = ActionState.EXPIRED, a.version + 1, now
                a.result = "expired: circuit breaker tripped"
            return True

    def reset_breaker(self, actor: str, now: float) -> bool:
        with Session(self.engine) as s, s.begin():
            row = self._state_row(s)
            was = bool(row.breaker_tripped)
            row.breaker_tripped, row.breaker_reason = False, ""
            row.breaker_reset_at, row.breaker_reset_by = now, actor
            row.version += 1
            self._audit_row(s, now, "breaker", "circuit breaker reset", actor=actor)
            return was

    # ---- incidents ---------------------------------------------------------------------------

    def open_incidents(self) -> list[IncidentRecord]:
        q = select(IncidentRow).where(
            IncidentRow.cluster == self.cluster, IncidentRow.status == IncidentStatus.OPEN
        )
        with Session(self.engine) as s:
            return [_incident(r) for r in s.scalars(q)]

    def get_incident(self, incident_id: str) -> IncidentRecord | None:
        with Session(self.engine) as s:
            row = s.get(IncidentRow, incident_id)
            return _incident(row) if row is not None else None

    def save_incidents(self, records: Iterable[IncidentRecord]) -> None:
        """Upsert in one statement per batch (the 10k-finding cycle must stay cheap)."""
        rows = [
            {
                "id": r.id,
                "cluster": r.cluster,
                "kind": r.kind,
                "entity_key": r.entity_key,
                "node": r.node,
                "gpu_uuid": r.gpu_uuid,
                "job": r.job,
                "status": r.status.value,
                "severity": r.severity,
                "summary": r.summary,
                "opened_at": r.opened_at,
                "updated_at": r.updated_at,
                "resolved_at": r.resolved_at,
                "first_seen": r.first_seen,
                "last_seen": r.last_seen,
                "seen_cycles": r.seen_cycles,
                "healthy_cycles": r.healthy_cycles,
                "evidence": dict(r.evidence),
                "last_decision": r.last_decision,
            }
            for r in records
        ]
        if not rows:
            return
        mod: Any = postgresql if self.engine.dialect.name == "postgresql" else sqlite
        keep = ("id", "cluster", "kind", "entity_key", "node", "gpu_uuid", "job", "opened_at")
        stmt = mod.insert(IncidentRow.__table__)
        stmt = stmt.on_conflict_do_update(
            index_elements=["id"], set_={c: stmt.excluded[c] for c in rows[0] if c not in keep}
        )
        with self.engine.begin() as conn:
            conn.execute(stmt, rows)  # executemany: compiled once

    # ---- actions -----------------------------------------------------------------------------

    def propose(self, new: NewAction, now: float) -> tuple[ActionRecord, bool]:
        """Journal a new action, or return the one already journaled under its key."""
        action_id = stable_id(self.cluster, new.idempotency_key)
        row = ActionRow(
            id=action_id,
            cluster=self.cluster,
            idempotency_key=new.idempotency_key,
            incident_id=new.incident_id,
            playbook=new.playbook,
            target=new.target,
            target_nodes=list(new.target_nodes),
            disruptive=new.disruptive,
            mode=new.mode.value,
            rule=new.rule,
            state=new.state.value,
            version=1,
            decision=new.decision.value,
            reasons=list(new.reasons),
            params=dict(new.params),
            plan=[i.to_json() for i in new.plan],
            progress=0,
            step_started=None,
            dry_run=new.dry_run,
            attempt=new.attempt,
            created_at=now,
            updated_at=now,
            result=new.result,
            phase="run",
            deadline=new.deadline,
        )
        try:
            with Session(self.engine, expire_on_commit=False) as s, s.begin():
                s.add(row)
                s.flush()
                self._audit_row(
                    s,
                    now,
                    "decision",
                    f"{new.playbook} on {new.target}: {new.decision.value}",
                    action_id=action_id,
                    incident_id=new.incident_id,
                    target=new.target,
                    detail={
                        "reasons": list(new.reasons),
                        "mode": new.mode.value,
                        "rule": new.rule,
                        "state": new.state.value,
                        "dry_run": new.dry_run,
                    },
                )
            return _action(row), True
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
        rows = [
            {
                "id": stable_id(self.cluster, n.idempotency_key),
                "cluster": self.cluster,
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
                "dry_run": n.dry_run,
                "attempt": n.attempt,
                "created_at": now,
                "updated_at": now,
                "approved_by": None,
                "lease_owner": None,
                "lease_until": None,
                "started_at": None,
                "result": n.result,
                "phase": "run",
                "deadline": n.deadline,
            }
            for n in news
        ]
        mod: Any = postgresql if self.engine.dialect.name == "postgresql" else sqlite
        with self.engine.begin() as conn:
            existing: set[str] = set()
            ids = [r["id"] for r in rows]
            for i in range(0, len(ids), 500):
                existing.update(
                    conn.scalars(select(ActionRow.id).where(ActionRow.id.in_(ids[i : i + 500])))
                )
            fresh = [r for r in rows if r["id"] not in existing]
            if fresh:
                conn.execute(mod.insert(ActionRow.__table__).on_conflict_do_nothing(), fresh)
            audits = [
                {
                    "cluster": self.cluster,
                    "at": now,
                    "actor": ACTOR,
                    "kind": "decision",
                    "action_id": r["id"],
                    "incident_id": r["incident_id"],
                    "target": r["target"],
                    "message": f"{r['playbook']} on {r['target']}: {r['decision']}",
                    "detail": {
                        "reasons": r["reasons"],
                        "mode": r["mode"],
                        "rule": r["rule"],
                        "state": r["state"],
                        "dry_run": r["dry_run"],
                    },
                }
                for r in fresh
            ]
            audits += [
                {
                    "cluster": self.cluster,
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
            if audits:
                conn.execute(insert(AuditRow), audits)
            return len(fresh)

    def get_action(self, action_id: str) -> ActionRecord | None:
        with Session(self.engine) as s:
            row = s.get(ActionRow, action_id)
            return _action(row) if row is not None else None

    def find_actions(self, prefix: str) -> list[ActionRecord]:
        q = select(ActionRow).where(
            ActionRow.cluster == self.cluster, ActionRow.id.startswith(prefix)
        )
        with Session(self.engine) as s:
            return [_action(r) for r in s.scalars(q)]

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
            return [_action(r) for r in s.scalars(q.order_by(ActionRow.created_at, ActionRow.id))]

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
            ActionRow.dry_run,
            ActionRow.created_at,
            ActionRow.attempt,
            ActionRow.started_at,
        )
        q = select(*cols).where(
            ActionRow.cluster == self.cluster,
            (ActionRow.updated_at >= since) | ActionRow.state.in_(active),
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
            return [_action(r) for r in s.scalars(q)]

    def active_actions(self) -> list[ActionRecord]:
        return self.actions([s for s in ActionState if not s.terminal])

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
            return _action(row)

    def insert_audit_rows(self, rows: Iterable[Mapping[str, Any]]) -> None:
        batch = [{"cluster": self.cluster, "detail": {}, "target": "", **r} for r in rows]
        if batch:
            with self.engine.begin() as conn:
                conn.execute(insert(AuditRow), batch)
