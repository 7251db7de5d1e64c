"""Scheduled jobs run once per fire: claimed in the store (migration 0004_service) before they
run; after a restart a missed fire within grace runs once, past grace it is recorded as missed,
and a second process never runs the same fire again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from gpufleet.service.context import ServiceJobContext
from gpufleet.service.job_runs import JobRuns
from gpufleet.service.registry import JOB_KINDS, JobKind
from gpufleet.service.schedule import ScheduledJobs, latest_fire
from gpufleet.service.service_config import ScheduleEntry
from harness.fake_cluster import FakeCluster
from remediations.cluster_view import ClusterView
from remediations.cycle import RemediationCycle
from remediations.policy import load_policy
from remediations.scheduled.context import JobContext, JobOutcome, JobRequest
from remediations.store import Store

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z, a Thursday
RAN: list[tuple[str, float]] = []


class _Params(BaseModel):
    pass


def _count(ctx: JobContext, req: JobRequest) -> JobOutcome:
    RAN.append((req.name, req.fire))
    return JobOutcome(True, "counted")


@pytest.fixture(autouse=True)
def counting_kind() -> Iterator[None]:
    JOB_KINDS["count"] = JobKind(_Params, _count)  # the registry's one-line extension point
    RAN.clear()
    yield
    del JOB_KINDS["count"]


class _Cluster(FakeCluster):
    def cluster_view(self, taken_at: float = 0.0) -> ClusterView:
        return self.view(taken_at)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(f"sqlite:///{tmp_path / 'j.db'}", cluster="c1")
    yield s
    s.close()


def _jobs(store: Store, wall: list[float], owner: str = "a") -> ScheduledJobs:
    loop = RemediationCycle(load_policy(), store, _Cluster({"p": 2}), owner, started_at=T0)
    ctx = ServiceJobContext(loop, clock=lambda: wall[0])
    return ScheduledJobs(ctx, JobRuns(store.engine, store.cluster), owner, wall=lambda: wall[0])


def _entry(grace: float = 600.0) -> ScheduleEntry:
    return ScheduleEntry(name="hourly", kind="count", cron="0 * * * *", misfire_grace=grace)


def test_latest_fire_reads_cron_in_its_time_zone() -> None:
    e = ScheduleEntry(name="x", kind="count", cron="0 22 * * *", timezone="Europe/Berlin")
    assert latest_fire(e, T0 + 3600, 86400) == T0 - 3 * 3600  # 22:00 CET = 21:00 UTC
    assert latest_fire(e, T0 + 3600, 60) is None


def test_a_fire_runs_once_even_when_asked_twice(store: Store) -> None:
    wall = [T0 + 5.0]
    jobs = _jobs(store, wall)
    assert jobs.fire(_entry()) is not None
    assert jobs.fire(_entry()) is None  # the same fire again (a duplicate trigger)
    assert _jobs(store, wall, owner="b").fire(_entry()) is None  # another process
    assert RAN == [("hourly", T0)]
    rec = JobRuns(store.engine, "c1").get("hourly")
    assert rec is not None and rec.runs == 1 and rec.last_ok and rec.last_outcome == "counted"
    audit = [a.message for a in store.audit_log() if a.kind == "schedule"]
    assert audit and "hourly (count)" in audit[0]


def test_missed_fire_runs_once_after_restart_within_grace(store: Store) -> None:
    wall = [T0 + 5.0]
    _jobs(store, wall).fire(_entry())
    wall[0] = T0 + 3600 + 300  # down over the 01:00 fire; back 5 min later (grace 10 min)
    restarted = _jobs(store, wall)
    fire = restarted.missed(_entry())
    assert fire == T0 + 3600
    restarted.fire(_entry(), fire)
    assert restarted.missed(_entry()) is None
    assert _jobs(store, wall, owner="b").missed(_entry()) is None
    restarted.fire(_entry(), fire)  # a catch-up and the scheduler racing: still once
    assert RAN == [("hourly", T0), ("hourly", T0 + 3600)]


def test_missed_fire_past_grace_is_recorded_never_run(store: Store) -> None:
    wall = [T0 + 5.0]
    _jobs(store, wall).fire(_entry())
    wall[0] = T0 + 3600 + 1200  # 20 min after the fire, grace 10 min
    restarted = _jobs(store, wall)
    assert restarted.missed(_entry()) is None
    rec = JobRuns(store.engine, "c1").get("hourly")
    assert rec is not None and rec.misses == 1 and rec.last_fire == T0 + 3600
    assert restarted.stats.misses == {"hourly": 1}
    assert restarted.fire(_entry(), T0 + 3600) is None
    assert RAN == [("hourly", T0)]


def test_first_start_does_not_run_fires_from_before_it_existed(store: Store) -> None:
    wall = [T0 + 60.0]
    assert _jobs(store, wall).missed(_entry()) is None
    assert RAN == []
