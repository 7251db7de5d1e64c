"""Fixtures for the remediation tests: a fresh journal on SQLite and on PostgreSQL.

Each PostgreSQL test gets its own schema (dropped afterwards), so parallel runs never collide.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from remediations.store import Store

PG_BASE = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def _pg_reason() -> str | None:
    try:
        import psycopg

        with psycopg.connect(
            "host=127.0.0.1 port=5432 dbname=test user=postgres", connect_timeout=3
        ):
            return None
    except Exception as exc:  # any failure means: skip, and say why
        return f"PostgreSQL at 127.0.0.1:5432 (db test, user postgres) unreachable: {exc}"


_PG_SKIP = _pg_reason()


_END_SESSIONS_IN_SCHEMA = """
SELECT pg_terminate_backend(pid) FROM (
  SELECT DISTINCT l.pid FROM pg_locks l
  JOIN pg_class c ON c.oid = l.relation
  JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = %s AND l.pid <> pg_backend_pid()
) holders
"""


@pytest.fixture
def pg_url() -> Iterator[str]:
    if _PG_SKIP:
        pytest.skip(_PG_SKIP)
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    dsn = "host=127.0.0.1 port=5432 dbname=test user=postgres"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{PG_BASE}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            # A session a test left behind (a killed replica's, behind a cut proxy) may still
            # hold locks in the schema; end it rather than wait on it forever.
            conn.execute(_END_SESSIONS_IN_SCHEMA, (schema,))
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'journal.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = Store.open(store_url, cluster="test-cluster")
    yield s
    s.close()
