"""The actions column `dry_run` is named `shadow`: the action was decided in shadow (issue 26).

A pure rename: every row keeps its value, and no index or constraint names the column. SQLite
renames it in place (ALTER TABLE ... RENAME COLUMN, SQLite >= 3.25), PostgreSQL likewise.

Revision ID: 0006_action_shadow
Revises: 0005_cluster_identity
"""

from __future__ import annotations

from alembic import op

revision = "0006_action_shadow"
down_revision = "0005_cluster_identity"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("actions") as batch:
        batch.alter_column("dry_run", new_column_name="shadow")


def downgrade() -> None:
    with op.batch_alter_table("actions") as batch:
        batch.alter_column("shadow", new_column_name="dry_run")
