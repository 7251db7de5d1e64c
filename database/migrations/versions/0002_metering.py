"""Metering: latest fleet state, 5-minute and hourly usage rollups, the cursor, daily reports.

Revision ID: 0002_metering
Revises: 0001

The tables are declared again in `database/tables/metering.py`;
`tests/metering/test_metering_store.py` compares the two.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_metering"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "metering_gpu_state",
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("uuid", sa.String(128), nullable=False),
        sa.Column("mig_instance", sa.String(16), nullable=False),
        sa.Column("taken_at", sa.Float, nullable=False),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("pool", sa.String(253), nullable=False),
        sa.Column("device", sa.Integer, nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("mig_profile", sa.String(32), nullable=False),
        sa.Column("health", sa.String(16), nullable=False),
        sa.Column("issue", sa.String(32), nullable=False),
        sa.Column("allocated", sa.Boolean, nullable=False),
        sa.Column("utilization", sa.Float, nullable=True),
        sa.Column("namespace", sa.String(253), nullable=False),
        sa.Column("pod", sa.String(253), nullable=False),
        sa.Column("job", sa.String(320), nullable=False),
        sa.Column("team", sa.String(253), nullable=False),
        sa.PrimaryKeyConstraint("cluster", "uuid", "mig_instance", name="pk_metering_gpu_state"),
    )
    op.create_table(
        "metering_cursor",
        sa.Column("cluster", sa.String(128), primary_key=True),
        sa.Column("taken_at", sa.Float, nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
    )
    for name in ("metering_usage", "metering_usage_hourly"):  # 5-minute and 1-hour buckets
        op.create_table(
            name,
            sa.Column("cluster", sa.String(128), nullable=False),
            sa.Column("dimension", sa.String(16), nullable=False),
            sa.Column("bucket", sa.Integer, nullable=False),
            sa.Column("key", sa.String(320), nullable=False),
            sa.Column("model", sa.String(128), nullable=False),
            sa.Column("gpu_seconds", sa.Float, nullable=False),
            sa.Column("allocated_seconds", sa.Float, nullable=False),
            sa.Column("busy_seconds", sa.Float, nullable=False),
            sa.Column("unmeasured_seconds", sa.Float, nullable=False),
            sa.PrimaryKeyConstraint(
                "cluster", "dimension", "bucket", "key", "model", name=f"pk_{name}"
            ),
        )
        op.create_index(f"ix_{name}_bucket", name, ["bucket"])
    op.create_table(
        "metering_reports",
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("end", sa.Integer, nullable=False),
        sa.Column("start", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("body", sa.JSON, nullable=False),
        sa.PrimaryKeyConstraint("cluster", "end", name="pk_metering_reports"),
    )


def downgrade() -> None:
    op.drop_table("metering_reports")
    for name in ("metering_usage_hourly", "metering_usage"):
        op.drop_index(f"ix_{name}_bucket", table_name=name)
        op.drop_table(name)
    op.drop_table("metering_cursor")
    op.drop_table("metering_gpu_state")
