"""The journal's tables, as SQLAlchemy 2.x declarative models.

The migrations in `database/migrations/versions` create exactly these tables;
`tests/database/test_schema_matches_tables.py` checks that the migrated schema and these
models agree, so the two cannot drift apart silently.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, Float, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from database.tables.metadata import METADATA


class Base(DeclarativeBase):
    metadata = METADATA


class IncidentRow(Base):
    """One incident: findings of one kind about one entity, from open to resolved."""

    __tablename__ = "incidents"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    cluster: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(32))
    entity_key: Mapped[str] = mapped_column(String(512))
    node: Mapped[str | None] = mapped_column(String(253), nullable=True)
    gpu_uuid: Mapped[str | None] = mapped_column(String(128), nullable=True)
    job: Mapped[str | None] = mapped_column(String(320), nullable=True)
    status: Mapped[str] = mapped_column(String(16))
    severity: Mapped[str] = mapped_column(String(16))
    summary: Mapped[str] = mapped_column(Text, default="")
    opened_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    resolved_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    first_seen: Mapped[float] = mapped_column(Float)
    last_seen: Mapped[float] = mapped_column(Float)
    seen_cycles: Mapped[int] = mapped_column(Integer, default=0)
    healthy_cycles: Mapped[int] = mapped_column(Integer, default=0)
    evidence: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    last_decision: Mapped[str] = mapped_column(String(64), default="")

    __table_args__ = (
        Index("ix_incidents_cluster_status", "cluster", "status"),
        Index("ix_incidents_cluster_entity", "cluster", "entity_key"),
    )


class ActionRow(Base):
    """One action: a persisted state machine (see `remediations.types.TRANSITIONS`).

    `version` is bumped by every transition; a transition names the version it read, so of two
    processes racing for the same step exactly one wins (optimistic concurrency).
    """

    __tablename__ = "actions"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    cluster: Mapped[str] = mapped_column(String(128))
    idempotency_key: Mapped[str] = mapped_column(String(512))
    incident_id: Mapped[str] = mapped_column(String(32))
    playbook: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(512))
    target_nodes: Mapped[list[str]] = mapped_column(JSON, default=list)
    disruptive: Mapped[bool] = mapped_column(Boolean, default=False)
    mode: Mapped[str] = mapped_column(String(16))
    rule: Mapped[str] = mapped_column(String(128), default="")
    state: Mapped[str] = mapped_column(String(24))
    version: Mapped[int] = mapped_column(Integer, default=1)
    decision: Mapped[str] = mapped_column(String(24))
    reasons: Mapped[list[str]] = mapped_column(JSON, default=list)
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    plan: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    progress: Mapped[int] = mapped_column(Integer, default=0)
    """Index of the next plan step to run; steps before it are done."""
    step_started: Mapped[int | None] = mapped_column(Integer, nullable=True)
    """Set (journaled) before a step's write is made; equal to `progress` while it runs."""
    dry_run: Mapped[bool] = mapped_column(Boolean, default=False)
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    approved_by: Mapped[str | None] = mapped_column(String(256), nullable=True)
    lease_owner: Mapped[str | None] = mapped_column(String(256), nullable=True)
    lease_until: Mapped[float | None] = mapped_column(Float, nullable=True)
    result: Mapped[str] = mapped_column(Text, default="")
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    """When it left `approved` for `executing` (what the rate and cooldown gates count)."""
    phase: Mapped[str] = mapped_column(String(16), default="run")
    """`run` while executing the plan, `rollback` while undoing it."""
    deadline: Mapped[float | None] = mapped_column(Float, nullable=True)
    """When verification (or approval) stops waiting."""

    __table_args__ = (
        UniqueConstraint("cluster", "idempotency_key", name="uq_actions_cluster_key"),
        Index("ix_actions_cluster_state", "cluster", "state"),
        Index("ix_actions_cluster_target", "cluster", "target"),
        Index("ix_actions_incident", "incident_id"),
    )


class AuditRow(Base):
    """Append-only: every gate decision, approval, transition and Kubernetes write.

    Database triggers (see the first migration) refuse UPDATE and DELETE on this table.
    """

    __tablename__ = "audit"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(128))
    at: Mapped[float] = mapped_column(Float)
    actor: Mapped[str] = mapped_column(String(256))
    kind: Mapped[str] = mapped_column(String(32))
    action_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    incident_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    target: Mapped[str] = mapped_column(String(512), default="")
    message: Mapped[str] = mapped_column(Text, default="")
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)

    __table_args__ = (Index("ix_audit_cluster_at", "cluster", "at"),)


class EngineStateRow(Base):
    """Per cluster: the global pause flag and the circuit breaker."""

    __tablename__ = "engine_state"

    cluster: Mapped[str] = mapped_column(String(128), primary_key=True)
    paused: Mapped[bool] = mapped_column(Boolean, default=False)
    paused_by: Mapped[str] = mapped_column(String(256), default="")
    paused_reason: Mapped[str] = mapped_column(Text, default="")
    breaker_tripped: Mapped[bool] = mapped_column(Boolean, default=False)
    breaker_tripped_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    breaker_reason: Mapped[str] = mapped_column(Text, default="")
    breaker_reset_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    breaker_reset_by: Mapped[str] = mapped_column(String(256), default="")
    version: Mapped[int] = mapped_column(Integer, default=1)
