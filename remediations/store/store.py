"""The journal: incidents, actions as persisted state machines, engine state, the audit log.

`Store.open(url, cluster)` migrates the schema and returns one cluster's view of it. The parts
live in `base` (database, audit), `actions` (the action journal), `state` (pause, breaker,
starts); incidents are here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from database.tables.journal import IncidentRow
from remediations.store.actions import ActionStore, TransitionRefused
from remediations.store.convert import incident_record
from remediations.store.records import (
    IncidentRecord,
)
from remediations.store.state import StateStore
from remediations.types import (
    IncidentStatus,
)


class Store(ActionStore, StateStore):
    # ---- incidents ---------------------------------------------------------------------------

    def open_incidents(self) -> list[IncidentRecord]:
        q = select(IncidentRow).where(
            IncidentRow.cluster == self.cluster, IncidentRow.status == IncidentStatus.OPEN
        )
        with Session(self.engine) as s:
            return [incident_record(r) for r in s.scalars(q)]

    def incidents(self, since: float | None = None) -> list[IncidentRecord]:
        """Incidents open at any time since `since` (all without it), oldest first."""
        q = select(IncidentRow).where(IncidentRow.cluster == self.cluster)
        if since is not None:
            q = q.where(IncidentRow.resolved_at.is_(None) | (IncidentRow.resolved_at >= since))
        with Session(self.engine) as s:
            return [incident_record(r) for r in s.scalars(q.order_by(IncidentRow.opened_at))]

    def find_incidents(self, prefix: str) -> list[IncidentRecord]:
        q = select(IncidentRow).where(
            IncidentRow.cluster == self.cluster, IncidentRow.id.startswith(prefix)
        )
        with Session(self.engine) as s:
            return [incident_record(r) for r in s.scalars(q)]

    def incidents_on(self, node: str) -> list[IncidentRecord]:
        """Every incident (open or resolved) about `node` or one of its GPUs."""
        q = select(IncidentRow).where(IncidentRow.cluster == self.cluster, IncidentRow.node == node)
        with Session(self.engine) as s:
            return [incident_record(r) for r in s.scalars(q)]

    def get_incident(self, incident_id: str) -> IncidentRecord | None:
        with Session(self.engine) as s:
            row = s.get(IncidentRow, incident_id)
            return incident_record(row) if row is not None else None

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


__all__ = ["Store", "TransitionRefused"]
