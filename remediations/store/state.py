"""Engine state per cluster: the pause flag, the circuit breaker, and the start token.

Every pause, breaker move and action start bumps the row's version; `claim` starts an action
only if that version is what the caller read before running its gates, which serialises starts
across processes (two runners cannot spend one blast-radius or rate budget twice).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from database.tables.journal import ActionRow, EngineStateRow
from remediations.store.base import StoreBase
from remediations.store.convert import action_record
from remediations.store.records import (
    ActionRecord,
    EngineState,
)
from remediations.types import (
    ActionState,
)


class StateStore(StoreBase):
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
            return action_record(row)

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
