"""Which cluster a `cluster` name belongs to: the kube-system namespace UID recorded on first start.

`gpufleet run` refuses to start when its configured name already belongs to another cluster, so
two clusters sharing one database (and the default name) never act on each other's journal.

Revision ID: 0005_cluster_identity
Revises: 0004_service
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_cluster_identity"
down_revision = "0004_service"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cluster_identity",
        sa.Column("cluster", sa.String(128), primary_key=True),
        sa.Column("kube_system_uid", sa.String(64), nullable=False),
        sa.Column("api_server", sa.String(512), nullable=False, server_default=""),
        sa.Column("recorded_at", sa.Float, nullable=False),
        sa.Column("recorded_by", sa.String(253), nullable=False, server_default=""),
    )


def downgrade() -> None:
    op.drop_table("cluster_identity")
