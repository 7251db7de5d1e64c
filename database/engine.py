"""Running the shipped Alembic migrations programmatically, and opening a database by URL.

gpufleet upgrades its own schema at start: there is no alembic.ini to find and no separate step
to forget. SQLite is the embedded default; PostgreSQL is the production store.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.pool import StaticPool

MIGRATIONS = Path(__file__).with_name("migrations")
DEFAULT_URL = "sqlite:///gpufleet.db"


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to `revision`; safe to run from several processes at once."""
    quiet = logging.getLogger("alembic")
    if quiet.level == logging.NOTSET:  # its per-run INFO lines are noise on every command
        quiet.setLevel(logging.WARNING)
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def schema_revisions(engine: Engine) -> tuple[str | None, str]:
    """(the database's current revision or None when never migrated, the shipped head)."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head() or ""
    with engine.connect() as conn:
        current = MigrationContext.configure(conn).get_current_revision()
    return current, head


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def make_engine(url: str) -> Engine:
    """An Engine for `url`: in-memory SQLite shares one connection; file SQLite uses WAL."""
    if url in ("sqlite://", "sqlite:///:memory:"):
        return create_engine(
            "sqlite://", connect_args={"check_same_thread": False}, poolclass=StaticPool
        )
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    engine = create_engine(url, pool_pre_ping=True)
    # Batch executemany INSERTs into multi-row VALUES (one round trip per ~1000 rows instead of
    # one pipelined statement per row): a 10k-finding cycle journals in one transaction.
    engine.dialect.use_insertmanyvalues_wo_returning = True
    return engine
