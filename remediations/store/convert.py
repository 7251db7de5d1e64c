"""Rows to frozen records, so callers never hold a live ORM object or a session."""

from __future__ import annotations

from database.tables.journal import ActionRow, AuditRow, IncidentRow
from remediations.store.records import (
    ActionRecord,
    AuditRecord,
    IncidentRecord,
)
from remediations.types import (
    ActionId,
    ActionState,
    IncidentId,
    IncidentStatus,
    Intent,
    Mode,
    Verdict,
)


def action_record(row: ActionRow) -> ActionRecord:
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
        shadow=bool(row.shadow),
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


def incident_record(row: IncidentRow) -> IncidentRecord:
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


def audit_record(row: AuditRow) -> AuditRecord:
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
