"""Alerts: the Slack outbox, messages and their incidents, approval prompts, the Alertmanager
intake (by fingerprint) and output, the audit cursor and seen signed requests.

The models are `database.tables.alerts` (this migration must not import the alerts layer).

Revision ID: 0003_alerts
Revises: 0002_metering
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_alerts"
down_revision = "0002_metering"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alerts_outbox",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("lane", sa.String(64), nullable=False),
        sa.Column("op", sa.String(24), nullable=False),
        sa.Column("message_id", sa.String(64), nullable=False),
        sa.Column("channel", sa.String(128), nullable=False),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("payload", sa.JSON, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("next_at", sa.Float, nullable=False),
        sa.Column("sent_at", sa.Float, nullable=True),
        sa.Column("last_error", sa.Text, nullable=False),
        sa.Column("result", sa.JSON, nullable=False),
    )
    op.create_index("ix_alerts_outbox_state", "alerts_outbox", ["cluster", "state", "next_at"])
    op.create_index("ix_alerts_outbox_lane", "alerts_outbox", ["cluster", "lane", "id"])

    op.create_table(
        "alerts_messages",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("group_key", sa.String(512), nullable=False),
        sa.Column("channel", sa.String(128), nullable=False),
        sa.Column("channel_id", sa.String(64), nullable=False),
        sa.Column("ts", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index(
        "ix_alerts_messages_group", "alerts_messages", ["cluster", "group_key", "status"]
    )

    op.create_table(
        "alerts_members",
        sa.Column("incident_id", sa.String(32), primary_key=True),
        sa.Column("message_id", sa.String(64), nullable=False),
    )
    op.create_index("ix_alerts_members_message", "alerts_members", ["message_id"])

    op.create_table(
        "alerts_prompts",
        sa.Column("action_id", sa.String(32), primary_key=True),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("message_id", sa.String(64), nullable=False),
        sa.Column("channel_id", sa.String(64), nullable=False),
        sa.Column("ts", sa.String(32), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
        sa.Column("decided_by", sa.String(256), nullable=False),
        sa.Column("decided_at", sa.Float, nullable=True),
    )

    op.create_table(
        "alerts_intake",
        sa.Column("cluster", sa.String(128), primary_key=True),
        sa.Column("fingerprint", sa.String(64), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("annotations", sa.JSON, nullable=False),
        sa.Column("starts_at", sa.Float, nullable=False),
        sa.Column("ends_at", sa.Float, nullable=True),
        sa.Column("received_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("deliveries", sa.Integer, nullable=False),
    )

    op.create_table(
        "alerts_am_output",
        sa.Column("incident_id", sa.String(32), primary_key=True),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("annotations", sa.JSON, nullable=False),
        sa.Column("starts_at", sa.Float, nullable=False),
        sa.Column("ends_at", sa.Float, nullable=True),
        sa.Column("next_at", sa.Float, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("sent_at", sa.Float, nullable=True),
    )
    op.create_index("ix_alerts_am_output_due", "alerts_am_output", ["cluster", "state", "next_at"])

    op.create_table(
        "alerts_cursor",
        sa.Column("cluster", sa.String(128), primary_key=True),
        sa.Column("audit_after", sa.Integer, nullable=False),
    )

    op.create_table(
        "alerts_seen_requests",
        sa.Column("digest", sa.String(64), primary_key=True),
        sa.Column("at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    for table in (
        "alerts_seen_requests",
        "alerts_cursor",
        "alerts_am_output",
        "alerts_intake",
        "alerts_prompts",
        "alerts_members",
        "alerts_messages",
        "alerts_outbox",
    ):
        op.drop_table(table)
