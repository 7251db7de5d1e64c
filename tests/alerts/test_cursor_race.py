"""Two replicas starting at once on one PostgreSQL journal both find no Slack cursor and both
insert it: the second must not crash its process (it did: `gpufleet run` exited at start-up
about one start in twenty in the two-process failover tests)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import insert
from sqlalchemy.orm import Session

from alerts.alerts_store import AlertsStore
from database.tables.alerts import CursorRow
from remediations.store import Store
from tests.remediations.conftest import pg_url

__all__ = ["pg_url"]  # the per-test PostgreSQL schema fixture
pytestmark = [pytest.mark.postgres]


@pytest.fixture
def journal(pg_url: str) -> Iterator[Store]:
    store = Store.open(pg_url, cluster="c1")
    yield store
    store.close()


def test_the_second_replica_to_insert_the_cursor_starts_anyway(journal: Store) -> None:
    other = AlertsStore(journal.engine, "c1")
    errors: list[BaseException] = []
    with journal.engine.connect() as first:  # the first replica's insert, not yet committed
        tx = first.begin()
        first.execute(insert(CursorRow).values(cluster="c1", audit_after=7))

        def second() -> None:  # reads no cursor, then waits on the first's row, then loses
            try:
                other.start_cursor()
            except BaseException as exc:  # reported to the test below
                errors.append(exc)

        t = threading.Thread(target=second)
        t.start()
        t.join(1.0)
        assert t.is_alive()  # blocked on the first replica's uncommitted row
        tx.commit()
        t.join(10)
    assert not t.is_alive() and errors == []
    with Session(journal.engine) as s:  # the first replica's cursor stands
        row = s.get(CursorRow, "c1")
        assert row is not None and row.audit_after == 7
