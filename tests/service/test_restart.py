"""Scheduler restart: a fire missed while the service was down runs once when `gpufleet run`
comes back within its grace (through APScheduler, claimed in the store), and a second restart
does not run it again."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from detectors.suite import DetectorSuite
from errors import TemporaryError
from gpufleet.live_cycle import LiveCycle
from gpufleet.service.job_runs import JobRuns
from gpufleet.service.runtime import Service, ServiceParts
from gpufleet.service.service_config import ServiceConfig, TelemetryConfig
from gpufleet.service.telemetry import Telemetry
from observer.fleet.model import FleetSnapshot
from remediations.cycle import RemediationCycle
from remediations.policy import load_policy
from remediations.store import Store
from tests.service.procs import wait_for
from tests.service.test_schedule import RAN, _Cluster, counting_kind

__all__ = ["counting_kind"]  # the fixture registering the `count` kind (autouse)


def _no_data() -> FleetSnapshot:
    raise TemporaryError("no fleet in this test")


def _service(store: Store, cfg: ServiceConfig, who: str) -> Service:
    loop = RemediationCycle(load_policy(), store, _Cluster({"p": 1}), who, started_at=time.time())
    parts = ServiceParts(
        cfg=cfg,
        store=store,
        live=LiveCycle(_no_data, DetectorSuite(()), loop),
        loop=loop,
        clock=time.time,
        interval=60.0,
        identity=who,
        telemetry=Telemetry(TelemetryConfig(), who),
    )
    return Service(parts)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(f"sqlite:///{tmp_path / 'j.db'}", cluster="c1")
    yield s
    s.close()


def test_missed_fire_runs_once_after_restart(store: Store) -> None:
    now = datetime.now(UTC)
    minute = now.replace(second=0, microsecond=0).timestamp()
    if time.time() - minute > 50:  # keep the just-passed fire well inside its grace
        time.sleep(61 - (time.time() - minute))
        minute += 60
    cfg = ServiceConfig.model_validate(
        {
            "http": {"port": 0},
            "schedule": [
                {"name": "every-minute", "kind": "count", "cron": "* * * * *",
                 "misfire_grace": "5m"},
            ],
        }
    )  # fmt: skip
    # The previous process ran the fire before the latest one, then went down.
    runs = JobRuns(store.engine, "c1")
    assert runs.claim("every-minute", "count", minute - 60, "old", minute - 60)
    runs.finish("every-minute", minute - 60, True, "counted", minute - 59)

    first = _service(store, cfg, "one").start()
    try:
        wait_for(lambda: [("every-minute", minute)] == RAN, 10, "the catch-up run")
    finally:
        assert first.shutdown() == 0
    second = _service(store, cfg, "two").start()
    try:
        time.sleep(1.0)
    finally:
        assert second.shutdown() == 0
    assert [("every-minute", minute)] == RAN or RAN[1:] == [("every-minute", minute + 60)]
    rec = runs.get("every-minute")
    assert rec is not None and rec.last_owner in ("one", "two") and rec.misses == 0
