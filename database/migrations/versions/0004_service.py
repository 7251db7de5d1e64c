"""The service's scheduled-job runs: the last scheduled fire each job claimed, and its outcome.

`gpufleet run` claims a fire time here before a scheduled job runs (an UPDATE that succeeds only
if the stored fire time is older), so a missed job runs once after a restart or a leader change,
never twice, even with two processes on one database.

Revision ID: 0004_service
Revises: 0003_alerts
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_service"
down_revision = "0003_alerts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "service_job_runs",
        sa.Column("cluster", sa.String(128), primary_key=True),
        sa.Column("job", sa.String(63), primary_key=True),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("last_fire", sa.Float, nullable=False),
        sa.Column("last_started", sa.Float, nullable=True),
        sa.Column("last_finished", sa.Float, nullable=True),
        sa.Column("last_ok", sa.Boolean, nullable=True),
        sa.Column("last_outcome", sa.Text, nullable=False, server_default=""),
        sa.Column("last_owner", sa.String(253), nullable=False, server_default=""),
        sa.Column("runs", sa.Integer, nullable=False, server_default="0"),
        sa.Column("misses", sa.Integer, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_table("service_job_runs")
