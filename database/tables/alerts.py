"""The alerts tables (SQLAlchemy models); migration `0003_alerts` creates exactly these.

Kept apart from the journal's models (`database.tables.journal`) because only `alerts/` reads
them; `tests/database/test_schema_matches_tables.py` checks that the migrated schema
and these models agree.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Float, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from database.tables.metadata import METADATA


class AlertsBase(DeclarativeBase):
    metadata = METADATA


class OutboxRow(AlertsBase):
    """One outgoing Slack call, stored before it is sent. `lane` orders rows: within a lane
    (one message and its thread) the worker sends strictly in id order."""

    __tablename__ = "alerts_outbox"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cluster: Mapped[str] = mapped_column(String(128))
    lane: Mapped[str] = mapped_column(String(64))
    op: Mapped[str] = mapped_column(String(24))
    """post | update | reply | ephemeral | prompt | prompt_update"""
    message_id: Mapped[str] = mapped_column(String(64), default="")
    channel: Mapped[str] = mapped_column(String(128), default="")
    severity: Mapped[str] = mapped_column(String(16), default="info")
    payload: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    state: Mapped[str] = mapped_column(String(16), default="pending")
    """pending | sending | sent | dead"""
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float)
    next_at: Mapped[float] = mapped_column(Float)
    sent_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_error: Mapped[str] = mapped_column(Text, default="")
    result: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)

    __table_args__ = (
        Index("ix_alerts_outbox_state", "cluster", "state", "next_at"),
        Index("ix_alerts_outbox_lane", "cluster", "lane", "id"),
    )


class MessageRow(AlertsBase):
    """One Slack message (a group: a node, a job, or a fleet-wide storm) and its thread."""

    __tablename__ = "alerts_messages"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    cluster: Mapped[str] = mapped_column(String(128))
    group_key: Mapped[str] = mapped_column(String(512))
    channel: Mapped[str] = mapped_column(String(128))
    """As configured (a name or an ID)."""
    channel_id: Mapped[str] = mapped_column(String(64), default="")
    """The ID Slack answered with; `chat.update` needs it (slack-sdk #1410)."""
    ts: Mapped[str] = mapped_column(String(32), default="")
    status: Mapped[str] = mapped_column(String(16), default="open")
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_alerts_messages_group", "cluster", "group_key", "status"),)


class MemberRow(AlertsBase):
    """Which message shows an incident (one message per incident)."""

    __tablename__ = "alerts_members"

    incident_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    message_id: Mapped[str] = mapped_column(String(64))

    __table_args__ = (Index("ix_alerts_members_message", "message_id"),)


class PromptRow(AlertsBase):
    """An approval prompt (buttons bound to one action), and how it ended."""

    __tablename__ = "alerts_prompts"

    action_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    cluster: Mapped[str] = mapped_column(String(128))
    message_id: Mapped[str] = mapped_column(String(64))
    channel_id: Mapped[str] = mapped_column(String(64), default="")
    ts: Mapped[str] = mapped_column(String(32), default="")
    state: Mapped[str] = mapped_column(String(16), default="pending")
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)
    decided_by: Mapped[str] = mapped_column(String(256), default="")
    decided_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class IntakeRow(AlertsBase):
    """An Alertmanager alert received by the webhook, by fingerprint (dedup)."""

    __tablename__ = "alerts_intake"

    cluster: Mapped[str] = mapped_column(String(128), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64), primary_key=True)
    status: Mapped[str] = mapped_column(String(16))
    labels: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    annotations: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    starts_at: Mapped[float] = mapped_column(Float)
    ends_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    received_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    deliveries: Mapped[int] = mapped_column(Integer, default=1)


class AmOutputRow(AlertsBase):
    """An incident posted to Alertmanager: re-sent before it expires, ended on resolve."""

    __tablename__ = "alerts_am_output"

    incident_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    cluster: Mapped[str] = mapped_column(String(128))
    labels: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    annotations: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    starts_at: Mapped[float] = mapped_column(Float)
    ends_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    """Set when the incident resolved."""
    next_at: Mapped[float] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(16), default="firing")
    """firing | ending | ended"""
    sent_at: Mapped[float | None] = mapped_column(Float, nullable=True)

    __table_args__ = (Index("ix_alerts_am_output_due", "cluster", "state", "next_at"),)


class CursorRow(AlertsBase):
    """Per cluster: the last audit row turned into thread lines (restart-safe)."""

    __tablename__ = "alerts_cursor"

    cluster: Mapped[str] = mapped_column(String(128), primary_key=True)
    audit_after: Mapped[int] = mapped_column(Integer, default=0)


class SeenRequestRow(AlertsBase):
    """Signed Slack requests already handled (replays inside the 5-minute window refused)."""

    __tablename__ = "alerts_seen_requests"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    at: Mapped[float] = mapped_column(Float)
