"""Every outage is said out loud: cycles that collect nothing (every exporter down, the target
list unreachable) raise one fleet-level monitoring_gap incident carrying the cause, announced
once in Slack's outbox and once to Alertmanager; the log has one line for the failing source,
not one per cycle and no traceback; metering counts the outage as allocated but unmeasured
time; when collection returns, one line says so and the incident resolves."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from alerts import AlertsRuntime
from alerts.alerts_config import parse_alerts_config
from alerts.alerts_store import AlertsStore
from database.tables.alerts import AmOutputRow
from detectors.findings import Finding, FindingKind, Severity
from detectors.suite import DetectorSuite
from errors import TemporaryError
from errors.outages import OutageLog
from gpufleet.live_cycle import LiveCycle
from harness.fake_cluster import FakeCluster
from metering import Meter, usage
from observer.fleet.model import FleetSnapshot
from remediations.cluster_view import ClusterView
from remediations.cycle import RemediationCycle
from remediations.incidents import HOLDS
from remediations.policy import load_policy
from remediations.store import Store
from remediations.types import IncidentStatus
from tests.metering.support import T0, fleet, snapshot

CAUSE = "cannot list scrape targets at http://127.0.0.1:9/targets: connection refused"
OUTAGE_CYCLES = 6
STEP = 30.0


class _Cluster(FakeCluster):
    def cluster_view(self, taken_at: float = 0.0) -> ClusterView:
        return self.view(taken_at)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(f"sqlite:///{tmp_path / 'j.db'}", cluster="c1")
    yield s
    s.close()


def test_a_total_exporter_outage_is_one_incident_one_message_one_log_line(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    f = fleet()  # 12 GPUs, 8 of them allocated to pods
    clock = [T0]
    down = [False]

    def collect() -> FleetSnapshot:
        if down[0]:
            raise TemporaryError(CAUSE)
        return snapshot(f, clock[0])

    loop = RemediationCycle(load_policy(), store, _Cluster({"p": 3}), "me", started_at=T0)
    alerts = AlertsRuntime(
        parse_alerts_config(
            {
                "slack": {"default_channel": "C0FLEET"},
                "alertmanager": {"url": "http://127.0.0.1:9"},
            },
            "t.yaml",
        ),
        store,
        loop.engine,
        clock=lambda: clock[0],
    )
    live = LiveCycle(collect, DetectorSuite.default(), loop, meter=Meter(store))

    def cycle() -> None:
        report = live.run_once(clock[0])
        alerts.on_cycle(report, clock[0])
        clock[0] += STEP

    caplog.set_level(logging.INFO)
    for _ in range(2):
        cycle()
    down[0] = True
    outage_from = clock[0]
    for _ in range(OUTAGE_CYCLES):
        cycle()
    outage_to = clock[0]

    fleet_gap = f"{FindingKind.MONITORING_GAP.value}|||"  # not a detector's coverage notice
    gaps = [i for i in store.open_incidents() if i.entity_key == fleet_gap]
    assert len(gaps) == 1, gaps
    gap = gaps[0]
    assert gap.node is None and gap.gpu_uuid is None  # the fleet, not a node
    assert CAUSE in gap.summary
    outbox = AlertsStore(store.engine, store.cluster).outbox()
    said = "monitoring_gap on `fleet` opened (warning): no telemetry from the fleet: " + CAUSE
    opened = [r for r in outbox if said in json.dumps(r.payload)]
    assert len(opened) == 1  # once, with the cause
    with Session(store.engine) as s:
        (am,) = s.scalars(select(AmOutputRow).where(AmOutputRow.incident_id == gap.id)).all()
    assert am.state == "firing"
    assert am.labels["alertname"] == "GpufleetMonitoringGap" and CAUSE in am.annotations["summary"]

    lines = [r for r in caplog.records if r.name == "gpufleet.live_cycle"]
    failing = [r for r in lines if "collect failing" in r.getMessage()]
    assert len(failing) == 1 and CAUSE in failing[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info]  # no traceback per cycle

    (row,) = usage(store, outage_from, outage_to, by="fleet")
    assert row.unmeasured_gpu_hours * 3600 == pytest.approx(8 * (outage_to - outage_from))

    down[0] = False
    for _ in range(4):
        cycle()
    assert any("collect recovered" in r.getMessage() for r in caplog.records)
    ended = store.get_incident(gap.id)
    assert ended is not None and ended.status is IncidentStatus.RESOLVED


def test_a_store_outage_is_one_line_per_minute_not_a_traceback_per_cycle(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    f = fleet()
    clock = [T0]
    loop = RemediationCycle(load_policy(), store, _Cluster({"p": 3}), "me", started_at=T0)
    live = LiveCycle(lambda: snapshot(f, clock[0]), DetectorSuite.default(), loop)
    assert live.run_once(clock[0]).ok
    with store.engine.begin() as conn:  # the journal's tables gone: every read and write fails
        for table in ("actions", "incidents", "audit", "engine_state"):
            conn.execute(text(f"DROP TABLE {table}"))
    caplog.set_level(logging.INFO)
    for _ in range(5):
        clock[0] += STEP
        report = live.run_once(clock[0])
        assert report.gpus == 12 and [e.stage for e in report.errors] == ["remediate"]
    lines = [r.getMessage() for r in caplog.records if "store failing" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "OperationalError" in lines[0] and "no such table" in lines[0]
    assert not [r for r in caplog.records if r.exc_info]


def test_outage_log_repeats_once_a_minute_with_the_count() -> None:
    t = [0.0]
    logger = logging.getLogger("test.outages")
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger.addHandler(Keep())
    try:
        out = OutageLog(logger, clock=lambda: t[0])
        for _ in range(13):  # a cycle every 10 s for two minutes
            out.failed("collect", "connection refused")
            t[0] += 10
        out.recovered("collect")
    finally:
        logger.handlers.clear()
    assert seen == [
        "collect failing for 0 s (1 failure since the last report): connection refused",
        "collect failing for 60 s (6 failures since the last report): connection refused",
        "collect failing for 120 s (6 failures since the last report): connection refused",
        "collect recovered after 130 s",
    ]


def test_a_failing_source_keeps_the_detectors_coverage_notices(store: Store) -> None:
    """The partial-source gap takes the place of the monitoring_gap detector's own fleet
    notice, never of a notice that a detector cannot run (another entity of the same kind)."""
    f = fleet()
    cannot_run = Finding(
        FindingKind.MONITORING_GAP, Severity.INFO, "nccl_hang cannot run: no step counter",
        T0, T0, detector="coverage",
    )  # fmt: skip

    def collect() -> FleetSnapshot:
        snap = snapshot(f, T0)
        assert snap.telemetry is not None
        t = replace(snap.telemetry, degraded_reason="target http://x/metrics failed: HTTP 503")
        return replace(snap, telemetry=t)

    loop = RemediationCycle(load_policy(), store, _Cluster({"p": 3}), "me", started_at=T0)
    live = LiveCycle(
        collect, DetectorSuite.default(), loop, extra_findings=lambda now: [cannot_run]
    )
    report = live.run_once(T0)
    gaps = [x for x in report.findings if x.kind is FindingKind.MONITORING_GAP]
    assert cannot_run in gaps
    (partial,) = [x for x in gaps if x.detector != "coverage"]
    assert partial.summary == "telemetry source failing: target http://x/metrics failed: HTTP 503"
    assert partial.evidence[HOLDS] is False  # the rest of the fleet is still judged
