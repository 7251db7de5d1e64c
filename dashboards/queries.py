"""Read-only queries over the journal for the pages, as pandas frames, for one cluster or all.

The store's own methods read one cluster's rows as records; the pages need cheap columnar reads
across clusters (a month of incidents at 10k GPUs), so these select only the columns a table
shows and leave the heavy JSON (evidence, plans) to the one-row reads. `cluster=None` reads every
cluster sharing the database; every frame carries a `cluster` column.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
from sqlalchemy import Engine, func, select, union
from sqlalchemy.exc import SQLAlchemyError

from database.tables import metering as metering_tables
from database.tables.journal import ActionRow, AuditRow, EngineStateRow, IncidentRow
from database.tables.service import JOB_RUNS

INCIDENT_COLUMNS = (
    IncidentRow.id,
    IncidentRow.cluster,
    IncidentRow.kind,
    IncidentRow.severity,
    IncidentRow.status,
    IncidentRow.node,
    IncidentRow.gpu_uuid,
    IncidentRow.job,
    IncidentRow.summary,
    IncidentRow.opened_at,
    IncidentRow.resolved_at,
    IncidentRow.last_seen,
    IncidentRow.last_decision,
)
ACTION_COLUMNS = (
    ActionRow.id,
    ActionRow.cluster,
    ActionRow.incident_id,
    ActionRow.playbook,
    ActionRow.target,
    ActionRow.mode,
    ActionRow.rule,
    ActionRow.state,
    ActionRow.decision,
    ActionRow.reasons,
    ActionRow.dry_run,
    ActionRow.disruptive,
    ActionRow.created_at,
    ActionRow.updated_at,
    ActionRow.approved_by,
    ActionRow.result,
    ActionRow.deadline,
)
AUDIT_COLUMNS = (
    AuditRow.id,
    AuditRow.cluster,
    AuditRow.at,
    AuditRow.actor,
    AuditRow.kind,
    AuditRow.action_id,
    AuditRow.incident_id,
    AuditRow.target,
    AuditRow.message,
    AuditRow.detail,
)


def _frame(engine: Engine, q: Any, columns: Sequence[Any]) -> pd.DataFrame:
    names = [c.key for c in columns]
    with engine.connect() as conn:
        rows = conn.execute(q).all()
    return pd.DataFrame([tuple(r) for r in rows], columns=names)


def clusters(engine: Engine) -> list[str]:
    """Every cluster with rows in the journal (engine state, incidents, actions, metering)."""
    q = union(
        select(EngineStateRow.cluster),
        select(IncidentRow.cluster).distinct(),
        select(ActionRow.cluster).distinct(),
        select(metering_tables.cursor.c.cluster),
    )
    with engine.connect() as conn:
        return sorted({str(r[0]) for r in conn.execute(q)})


def incidents(
    engine: Engine,
    cluster: str | None,
    since: float,
    until: float | None = None,
    limit: int = 5000,
) -> pd.DataFrame:
    """Incidents open at any time in [since, until], newest first (no evidence)."""
    q = select(*INCIDENT_COLUMNS).where(
        (IncidentRow.resolved_at.is_(None)) | (IncidentRow.resolved_at >= since)
    )
    if until is not None:
        q = q.where(IncidentRow.opened_at <= until)
    if cluster is not None:
        q = q.where(IncidentRow.cluster == cluster)
    q = q.order_by(IncidentRow.opened_at.desc()).limit(limit)
    return _frame(engine, q, INCIDENT_COLUMNS)


def incident_counts(engine: Engine, cluster: str | None) -> dict[str, int]:
    """Open incidents by severity."""
    q = select(IncidentRow.severity, func.count()).where(IncidentRow.status == "open")
    if cluster is not None:
        q = q.where(IncidentRow.cluster == cluster)
    with engine.connect() as conn:
        return {str(s): int(n) for s, n in conn.execute(q.group_by(IncidentRow.severity))}


def incident_evidence(engine: Engine, incident_id: str) -> dict[str, Any]:
    with engine.connect() as conn:
        row = conn.execute(
            select(IncidentRow.evidence).where(IncidentRow.id == incident_id)
        ).first()
    return dict(row[0] or {}) if row is not None else {}


def actions(
    engine: Engine,
    cluster: str | None,
    since: float | None = None,
    states: Sequence[str] | None = None,
    incident_id: str | None = None,
    limit: int = 5000,
) -> pd.DataFrame:
    """Actions, newest first."""
    q = select(*ACTION_COLUMNS)
    if cluster is not None:
        q = q.where(ActionRow.cluster == cluster)
    if since is not None:
        q = q.where(ActionRow.updated_at >= since)
    if states is not None:
        q = q.where(ActionRow.state.in_(list(states)))
    if incident_id is not None:
        q = q.where(ActionRow.incident_id == incident_id)
    q = q.order_by(ActionRow.created_at.desc(), ActionRow.id).limit(limit)
    return _frame(engine, q, ACTION_COLUMNS)


def audit(
    engine: Engine,
    cluster: str | None,
    since: float | None = None,
    kinds: Sequence[str] | None = None,
    action_id: str | None = None,
    incident_id: str | None = None,
    limit: int = 2000,
) -> pd.DataFrame:
    """Audit rows, newest first."""
    q = select(*AUDIT_COLUMNS)
    if cluster is not None:
        q = q.where(AuditRow.cluster == cluster)
    if since is not None:
        q = q.where(AuditRow.at >= since)
    if kinds is not None:
        q = q.where(AuditRow.kind.in_(list(kinds)))
    if action_id is not None:
        q = q.where(AuditRow.action_id == action_id)
    if incident_id is not None:
        q = q.where(AuditRow.incident_id == incident_id)
    q = q.order_by(AuditRow.id.desc()).limit(limit)
    return _frame(engine, q, AUDIT_COLUMNS)


def engine_states(engine: Engine, cluster: str | None) -> pd.DataFrame:
    cols = (
        EngineStateRow.cluster,
        EngineStateRow.paused,
        EngineStateRow.paused_by,
        EngineStateRow.paused_reason,
        EngineStateRow.breaker_tripped,
        EngineStateRow.breaker_tripped_at,
        EngineStateRow.breaker_reason,
        EngineStateRow.breaker_reset_at,
        EngineStateRow.breaker_reset_by,
    )
    q = select(*cols)
    if cluster is not None:
        q = q.where(EngineStateRow.cluster == cluster)
    return _frame(engine, q.order_by(EngineStateRow.cluster), cols)


def usage_series(
    engine: Engine,
    cluster: str | None,
    dimension: str,
    start: float,
    end: float,
    resolution: int = 300,
    key: str | None = None,
) -> pd.DataFrame:
    """GPU-hours per key over time from metering's rollups (hourly ones when `resolution` is
    whole hours, else the 5-minute ones), summed over GPU models and clusters into
    `resolution`-second steps in SQL (a month of one team is 720 rows, not 8,640 x models)."""
    hourly = resolution % 3600 == 0
    u = (metering_tables.usage_hourly if hourly else metering_tables.usage).c
    size = 3600 if hourly else 300
    lo = int(start // size * size)
    hi = int(-(-end // size) * size)
    t = (u.bucket - u.bucket % resolution).label("t")
    q = select(
        u.key,
        t,
        (func.sum(u.gpu_seconds) / 3600.0).label("gpu_hours"),
        (func.sum(u.allocated_seconds) / 3600.0).label("allocated_gpu_hours"),
        (func.sum(u.busy_seconds) / 3600.0).label("busy_gpu_hours"),
    ).where(u.dimension == dimension, u.bucket >= lo, u.bucket < hi)
    if cluster is not None:
        q = q.where(u.cluster == cluster)
    if key is not None:
        q = q.where(u.key == key)
    q = q.group_by(u.key, t).order_by(u.key, t)
    with engine.connect() as conn:
        rows = conn.execute(q).all()
    cols = ["key", "t", "gpu_hours", "allocated_gpu_hours", "busy_gpu_hours"]
    return pd.DataFrame([tuple(r) for r in rows], columns=cols)


def taken_out(
    engine: Engine,
    cluster: str | None,
    playbooks: Sequence[str],
    returns: Sequence[str],
    since: float,
) -> pd.DataFrame:
    """(cluster, target) of every target an action of `playbooks` started on and that no
    finished action of `returns` gave back after, or gave back at `since` or later (the table
    keeps returns a while; older ones are not read at all)."""
    a = ActionRow
    outs = (
        select(a.cluster, a.target, func.max(a.started_at).label("out"))
        .where(a.playbook.in_(list(playbooks)), a.started_at.is_not(None))
        .group_by(a.cluster, a.target)
    )
    if cluster is not None:
        outs = outs.where(a.cluster == cluster)
    o = outs.subquery()
    backs = (
        select(
            a.cluster, a.target, func.max(func.coalesce(a.started_at, a.created_at)).label("back")
        )
        .where(a.playbook.in_(list(returns)), a.state == "done")
        .group_by(a.cluster, a.target)
        .subquery()
    )
    q = (
        select(o.c.cluster, o.c.target)
        .outerjoin(backs, (backs.c.cluster == o.c.cluster) & (backs.c.target == o.c.target))
        .where(backs.c.back.is_(None) | (backs.c.back < o.c.out) | (backs.c.back >= since))
        .order_by(o.c.cluster, o.c.target)
    )
    return _frame(engine, q, (o.c.cluster, o.c.target))


JOB_RUN_COLUMNS = ("job", "kind", "last_fire", "last_finished", "last_ok", "last_outcome")


def job_runs(engine: Engine, cluster: str | None) -> pd.DataFrame:
    """Each scheduled job's last run: what the service actually runs, next to the policy's
    windows. Empty when no service ever ran on this database."""
    q = select(JOB_RUNS.c.cluster, *(JOB_RUNS.c[c] for c in JOB_RUN_COLUMNS))
    if cluster is not None:
        q = q.where(JOB_RUNS.c.cluster == cluster)
    try:
        with engine.connect() as conn:
            rows = conn.execute(q.order_by(JOB_RUNS.c.job)).all()
    except SQLAlchemyError:  # no such table: the service never ran here
        return pd.DataFrame(columns=["cluster", *JOB_RUN_COLUMNS])
    return pd.DataFrame([tuple(r) for r in rows], columns=["cluster", *JOB_RUN_COLUMNS])
