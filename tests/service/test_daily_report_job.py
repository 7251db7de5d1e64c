"""The metering daily report as a scheduled job: it runs through the schedule's claim (once per
fire), writes the day's report to the store, and bad params fail at config load."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from gpufleet.service.context import ServiceJobContext
from gpufleet.service.job_runs import JobRuns
from gpufleet.service.schedule import ScheduledJobs
from gpufleet.service.service_config import ScheduleEntry
from harness.fake_cluster import FakeCluster
from metering import Meter, MeteringConfig, reports
from remediations.cluster_view import ClusterView
from remediations.cycle import RemediationCycle
from remediations.policy import load_policy
from remediations.store import Store
from tests.metering.support import T0, fleet, snapshot

DAY = 86_400.0


class _Cluster(FakeCluster):
    def cluster_view(self, taken_at: float = 0.0) -> ClusterView:
        return self.view(taken_at)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(f"sqlite:///{tmp_path / 'j.db'}", cluster="c1")
    yield s
    s.close()


def test_scheduled_daily_report_writes_the_days_report_once(store: Store) -> None:
    prices = MeteringConfig(prices={"NVIDIA H100 80GB HBM3": 2.0})
    meter = Meter(store, prices)
    f = fleet()
    meter.record_cycle(snapshot(f, T0 + 600))
    meter.record_cycle(snapshot(f, T0 + 630))
    wall = [T0 + DAY + 300]  # 00:05 the next day, when the cron below fires
    loop = RemediationCycle(load_policy(), store, _Cluster({"p": 1}), "a", started_at=T0)
    ctx = ServiceJobContext(loop, clock=lambda: wall[0], metering=prices)
    jobs = ScheduledJobs(ctx, JobRuns(store.engine, store.cluster), "a", wall=lambda: wall[0])
    entry = ScheduleEntry(name="daily", kind="daily_report", cron="5 0 * * *")

    outcome = jobs.fire(entry)
    assert outcome is not None and outcome.ok, outcome
    assert "GPU-h allocated" in outcome.summary
    day = datetime.fromtimestamp(T0, UTC).strftime("%Y-%m-%d")
    nxt = datetime.fromtimestamp(T0 + DAY, UTC).strftime("%Y-%m-%d")
    assert f"daily report c1 for {day} 00:00 to {nxt} 00:00 UTC:" in outcome.summary
    assert jobs.fire(entry) is None  # the same fire again: already claimed, no second report
    (report,) = reports(store)
    assert (report.start, report.end) == (int(T0), int(T0 + DAY))
    # 12 GPUs for 30 s; 8 of them allocated (node 0's job and node 1's pod)
    assert report.totals.gpu_hours == pytest.approx(12 * 30 / 3600)
    assert report.totals.allocated_gpu_hours == pytest.approx(8 * 30 / 3600)


def test_unknown_report_time_zone_is_refused_at_load() -> None:
    with pytest.raises(ValidationError, match="unknown time zone 'Mars/Olympus'"):
        ScheduleEntry(
            name="daily", kind="daily_report", cron="5 0 * * *", params={"timezone": "Mars/Olympus"}
        )


def test_a_report_of_the_last_24_hours_covers_a_fleet_younger_than_a_day(store: Store) -> None:
    """The demo's fleet started minutes ago: the previous day is empty, the last 24 h are not."""
    meter = Meter(store, MeteringConfig())
    f = fleet()
    meter.record_cycle(snapshot(f, T0 + 600))
    meter.record_cycle(snapshot(f, T0 + 630))
    wall = [T0 + 3600.0]
    loop = RemediationCycle(load_policy(), store, _Cluster({"p": 1}), "a", started_at=T0)
    ctx = ServiceJobContext(loop, clock=lambda: wall[0], metering=MeteringConfig())
    jobs = ScheduledJobs(ctx, JobRuns(store.engine, store.cluster), "a", wall=lambda: wall[0])
    entry = ScheduleEntry(
        name="demo-daily", kind="daily_report", cron="*/4 * * * *", params={"covers": "last_24h"}
    )
    outcome = jobs.fire(entry)
    assert outcome is not None and outcome.ok, outcome
    (report,) = reports(store)
    assert report.end >= T0 + 3300 and report.start <= T0 + 600
    assert report.totals.allocated_gpu_hours == pytest.approx(8 * 30 / 3600)
    assert f"{report.totals.allocated_gpu_hours:.1f} GPU-h allocated" in outcome.summary
