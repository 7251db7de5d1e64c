"""A fresh, empty database on SQLite and on PostgreSQL (its own schema per test, dropped after),
from the journal tests' fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.remediations.conftest import pg_url

__all__ = ["pg_url"]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'gpufleet.db'}"
    return str(request.getfixturevalue("pg_url"))
