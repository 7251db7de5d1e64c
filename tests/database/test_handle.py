"""Metering, the alerts' tables and the service's job runs need only a database handle: they run
on a plain `Database`, with no journal object anywhere, and share its engine."""

from __future__ import annotations

from alerts.alerts_store import AlertsStore
from database.handle import Database
from gpufleet.service.job_runs import JobRuns
from metering import Meter, daily_report, fleet_state, last_cycle, prune, reports
from tests.metering.support import T0, fleet, snapshot

DAY = 86400.0


def test_metering_and_job_runs_run_on_a_plain_handle(database_url: str) -> None:
    db = Database.open(database_url, cluster="c1")
    try:
        f = fleet()
        meter = Meter(db)
        meter.record_cycle(snapshot(f, T0))
        meter.record_cycle(snapshot(f, T0 + 30))
        assert last_cycle(db) == T0 + 30 and len(fleet_state(db)) == 12
        report = daily_report(db, end=T0 + DAY, now=T0 + DAY)
        assert report.totals.gpu_hours > 0 and reports(db) == [report]
        assert prune(db, T0 + 400 * DAY).usage_rows > 0  # 5-minute buckets kept far less long

        runs = JobRuns.on(db)
        assert runs.engine is db.engine and runs.cluster == "c1"  # the same pool, the same rows
        assert runs.claim("hourly", "count", T0, "a", T0)
        assert not JobRuns.on(db).claim("hourly", "count", T0, "b", T0)  # claimed once

        alerts = AlertsStore.on(db)
        alerts.start_cursor()
        assert alerts.engine is db.engine and alerts.backlog(T0)["unsent"] == 0
    finally:
        db.close()
