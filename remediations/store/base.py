"""The store's common part: one cluster's handle on the database, the append-only audit.

Audit rows are written in the same transaction as the change they record; `audit` appends one
on its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from database.handle import Database
from database.tables.journal import AuditRow
from remediations.store.convert import audit_record
from remediations.store.records import (
    AuditRecord,
)
from remediations.types import (
    ACTOR,
)


class StoreBase(Database):
    """One cluster's view of the journal database (many clusters may share one PostgreSQL)."""

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

    def audit_log(
        self, since: float | None = None, limit: int | None = None, after_id: int | None = None
    ) -> list[AuditRecord]:
        """Oldest first; `after_id`: only rows newer than that one (a follower's cursor)."""
        q = select(AuditRow).where(AuditRow.cluster == self.cluster)
        if since is not None:
            q = q.where(AuditRow.at >= since)
        if after_id is not None:
            q = q.where(AuditRow.id > after_id)
        q = q.order_by(AuditRow.id)
        if limit is not None:
            q = q.limit(limit)
        with Session(self.engine) as s:
            return [audit_record(r) for r in s.scalars(q)]

    def insert_audit_rows(self, rows: Iterable[Mapping[str, Any]]) -> None:
        batch = [{"cluster": self.cluster, "detail": {}, "target": "", **r} for r in rows]
        if batch:
            with self.engine.begin() as conn:
                conn.execute(insert(AuditRow), batch)

    def audit_of(self, kind: str, targets: Iterable[str]) -> list[AuditRecord]:
        """Audit rows of one kind about these targets, oldest first."""
        q = select(AuditRow).where(
            AuditRow.cluster == self.cluster,
            AuditRow.kind == kind,
            AuditRow.target.in_(list(targets)),
        )
        with Session(self.engine) as s:
            return [audit_record(r) for r in s.scalars(q.order_by(AuditRow.id))]
