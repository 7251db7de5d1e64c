"""Alembic environment: migrations run programmatically on the connection the store hands in.

`database.engine.upgrade(engine)` puts that connection in `config.attributes`; there is
no alembic.ini and no URL in this file. On PostgreSQL an advisory lock serialises two processes
that start at the same moment.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import text

from database.tables import METADATA

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=METADATA, render_as_batch=True)
with context.begin_transaction():
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(7423001)"))
    context.run_migrations()
