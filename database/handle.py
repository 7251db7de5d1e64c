"""`Database`: one cluster's handle on gpufleet's database, what every room that keeps rows needs.

Many clusters may share one PostgreSQL; every row names its cluster, so a handle is the engine
and the cluster name together. The journal (`remediations.store.Store`), the alerts' tables
(`alerts.alerts_store.AlertsStore`) and the service's job runs are handles with their own
tables' reads and writes; metering's functions take a plain handle.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Self

from sqlalchemy import Connection, Engine

from database.engine import make_engine, upgrade


class Database:
    """The engine and the cluster name: what a room needs to read and write its own rows."""

    def __init__(self, engine: Engine, cluster: str = "default") -> None:
        self.engine = engine
        self.cluster = cluster

    @classmethod
    def open(cls, url: str, cluster: str = "default", migrate: bool = True) -> Self:
        """Open `url` (see `database.engine.make_engine`), upgrading its schema to head first."""
        engine = make_engine(url)
        if migrate:
            upgrade(engine)
        return cls(engine, cluster)

    @classmethod
    def on(cls, db: Database) -> Self:
        """The same database and cluster as `db`, through this class's tables (no new pool)."""
        return cls(db.engine, db.cluster)

    def close(self) -> None:
        self.engine.dispose()

    def begin(self) -> AbstractContextManager[Connection]:
        """A connection in one transaction: committed when the block ends, rolled back on error."""
        return self.engine.begin()

    def connect(self) -> AbstractContextManager[Connection]:
        """A connection for reads (no transaction to commit)."""
        return self.engine.connect()

    @property
    def dialect(self) -> str:
        """`sqlite` or `postgresql`: the few upserts that differ ask."""
        return self.engine.dialect.name
