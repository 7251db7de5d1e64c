"""Initial journal: incidents, actions, append-only audit, engine state.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "incidents",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("entity_key", sa.String(512), nullable=False),
        sa.Column("node", sa.String(253), nullable=True),
        sa.Column("gpu_uuid", sa.String(128), nullable=True),
        sa.Column("job", sa.String(320), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("opened_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("resolved_at", sa.Float, nullable=True),
        sa.Column("first_seen", sa.Float, nullable=False),
        sa.Column("last_seen", sa.Float, nullable=False),
        sa.Column("seen_cycles", sa.Integer, nullable=False),
        sa.Column("healthy_cycles", sa.Integer, nullable=False),
        sa.Column("evidence", sa.JSON, nullable=False),
        sa.Column("last_decision", sa.String(64), nullable=False),
    )
    op.create_index("ix_incidents_cluster_status", "incidents", ["cluster", "status"])
    op.create_index("ix_incidents_cluster_entity", "incidents", ["cluster", "entity_key"])

    op.create_table(
        "actions",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("idempotency_key", sa.String(512), nullable=False),
        sa.Column("incident_id", sa.String(32), nullable=False),
        sa.Column("playbook", sa.String(64), nullable=False),
        sa.Column("target", sa.String(512), nullable=False),
        sa.Column("target_nodes", sa.JSON, nullable=False),
        sa.Column("disruptive", sa.Boolean, nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("rule", sa.String(128), nullable=False),
        sa.Column("state", sa.String(24), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("decision", sa.String(24), nullable=False),
        sa.Column("reasons", sa.JSON, nullable=False),
        sa.Column("params", sa.JSON, nullable=False),
        sa.Column("plan", sa.JSON, nullable=False),
        sa.Column("progress", sa.Integer, nullable=False),
        sa.Column("step_started", sa.Integer, nullable=True),
        sa.Column("dry_run", sa.Boolean, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("approved_by", sa.String(256), nullable=True),
        sa.Column("lease_owner", sa.String(256), nullable=True),
        sa.Column("lease_until", sa.Float, nullable=True),
        sa.Column("result", sa.Text, nullable=False),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("deadline", sa.Float, nullable=True),
        sa.UniqueConstraint("cluster", "idempotency_key", name="uq_actions_cluster_key"),
    )
    op.create_index("ix_actions_cluster_state", "actions", ["cluster", "state"])
    op.create_index("ix_actions_cluster_target", "actions", ["cluster", "target"])
    op.create_index("ix_actions_incident", "actions", ["incident_id"])

    op.create_table(
        "audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("actor", sa.String(256), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("action_id", sa.String(32), nullable=True),
        sa.Column("incident_id", sa.String(32), nullable=True),
        sa.Column("target", sa.String(512), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("detail", sa.JSON, nullable=False),
    )
    op.create_index("ix_audit_cluster_at", "audit", ["cluster", "at"])

    op.create_table(
        "engine_state",
        sa.Column("cluster", sa.String(128), primary_key=True),
        sa.Column("paused", sa.Boolean, nullable=False),
        sa.Column("paused_by", sa.String(256), nullable=False),
        sa.Column("paused_reason", sa.Text, nullable=False),
        sa.Column("breaker_tripped", sa.Boolean, nullable=False),
        sa.Column("breaker_tripped_at", sa.Float, nullable=True),
        sa.Column("breaker_reason", sa.Text, nullable=False),
        sa.Column("breaker_reset_at", sa.Float, nullable=True),
        sa.Column("breaker_reset_by", sa.String(256), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
    )

    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        op.execute(
            "CREATE FUNCTION gpufleet_audit_append_only() RETURNS trigger AS $$ "
            "BEGIN RAISE EXCEPTION 'audit is append-only'; END; $$ LANGUAGE plpgsql"
        )
        op.execute(
            "CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit "
            "FOR EACH ROW EXECUTE FUNCTION gpufleet_audit_append_only()"
        )
    elif dialect == "sqlite":
        for event in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER audit_no_{event.lower()} BEFORE {event} ON audit "
                "BEGIN SELECT RAISE(ABORT, 'audit is append-only'); END"
            )


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS audit_append_only ON audit")
        op.execute("DROP FUNCTION IF EXISTS gpufleet_audit_append_only()")
    for table in ("engine_state", "audit", "actions", "incidents"):
        op.drop_table(table)
