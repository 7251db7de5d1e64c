"""A single failing source among several is said out loud: one exporter of many answering 503,
or the Kubernetes API failing while the exporters answer, raises one fleet-level monitoring_gap
incident carrying the cause, announced once to Slack's outbox and to Alertmanager, logged once
(not once per cycle), and resolved when the source returns; metering counts the GPUs behind
the failing exporter as unmeasured for the outage, never as gone. Real simulator servers
(exporters over HTTP, the Kubernetes API with injected 503s) and the real `kubernetes` client."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from alerts import AlertsRuntime
from alerts.alerts_config import parse_alerts_config
from alerts.alerts_store import AlertsStore
from database.tables.alerts import AmOutputRow
from detectors.findings import FindingKind
from detectors.suite import DetectorSuite
from gpufleet.live_cycle import LiveCycle, scrape_source
from gpufleet.service.actuator import CachedActuator, SnapshotCache
from kube.actuator import KubeActuator
from metering import Meter, usage
from observer.kube.collector import KubeCollector, KubeSettings
from observer.scrape.collector import ScrapeCollector, ScrapeSettings
from remediations.cycle import RemediationCycle
from remediations.policy import load_policy
from remediations.store import IncidentRecord, Store
from remediations.types import IncidentStatus
from simulator.clock import ManualWall
from simulator.cluster import ClusterOptions
from simulator.serve import SimulationHandle, start_simulation
from tests.simulator_cases import small

FLEET_GAP = f"{FindingKind.MONITORING_GAP.value}|||"
STEP = 30.0
RESOURCES = ("nodes", "pods", "events")


@dataclass
class Rig:
    handle: SimulationHandle
    wall: ManualWall
    store: Store
    live: LiveCycle
    alerts: AlertsRuntime
    kube: KubeCollector

    def cycle(self) -> None:
        now = self.handle.clock.scenario_time()
        self.alerts.on_cycle(self.live.run_once(now), now)
        self.wall.advance(STEP)

    def fleet_gaps(self) -> list[IncidentRecord]:
        return [i for i in self.store.open_incidents() if i.entity_key == FLEET_GAP]

    def said(self, text: str) -> int:
        outbox = AlertsStore(self.store.engine, self.store.cluster).outbox()
        return sum(text in json.dumps(r.payload) for r in outbox)

    def alertmanager(self, incident: IncidentRecord) -> AmOutputRow:
        with Session(self.store.engine) as s:
            (row,) = s.scalars(
                select(AmOutputRow).where(AmOutputRow.incident_id == incident.id)
            ).all()
        return row


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    sc = small()  # a100-0001's exporter answers 503 from minute 5 to minute 8
    wall = ManualWall(sc.start)
    handle = start_simulation(
        sc, wall=wall, options=ClusterOptions(startup_seconds=0), kubeconfig_out=tmp_path / "kc"
    )
    kube = KubeCollector(
        KubeSettings(
            kubeconfig=str(tmp_path / "kc"), watch_timeout=1, backoff_initial=0.05,
            backoff_max=0.2, request_timeout=2.0,
        )
    ).start()  # fmt: skip
    assert kube.wait_synced(10)
    store = Store.open(f"sqlite:///{tmp_path / 'j.db'}", cluster="c1")
    scraper = ScrapeCollector(
        ScrapeSettings(discovery_url=f"{handle.metrics_url}/targets", timeout=1.0),
        now=handle.clock.scenario_time,
    )
    actuator = KubeActuator.from_kubeconfig(tmp_path / "kc")
    clock = handle.clock.scenario_time
    cache = SnapshotCache()  # the engine's view is the cycle's snapshot, as `gpufleet run` wires it
    cached = CachedActuator(actuator, cache, None)
    loop = RemediationCycle(load_policy(), store, cached, "me", started_at=sc.start)
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
        clock=clock,
    )
    live = LiveCycle(
        cache.wrap(scrape_source(scraper, kube)), DetectorSuite.default(), loop, meter=Meter(store)
    )
    yield Rig(handle, wall, store, live, alerts, kube)
    scraper.close()
    actuator.close()
    kube.stop()
    store.close()
    handle.stop()


def _wait(cond: Callable[[], object], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_one_exporter_of_many_down_is_a_fleet_gap_with_its_cause(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    for _ in range(10):  # minutes 0-4:30: every exporter answers
        rig.cycle()
    assert rig.fleet_gaps() == []
    for _ in range(6):  # minutes 5-7:30: a100-0001 answers 503, the other exporters answer
        rig.cycle()
    (gap,) = rig.fleet_gaps()
    assert gap.node is None and gap.gpu_uuid is None  # the fleet, not (only) the node
    assert "a100-0001" in gap.summary and "HTTP 503" in gap.summary
    said = "monitoring_gap on `fleet` opened (warning): telemetry source failing: "
    assert rig.said(said) == 1  # once, with the cause
    assert rig.said("a100-0001") >= 1
    am = rig.alertmanager(gap)
    assert am.state == "firing" and "HTTP 503" in am.annotations["summary"]
    lines = [r.getMessage() for r in caplog.records if "telemetry source failing" in r.getMessage()]
    assert len(lines) == 1 and "a100-0001" in lines[0], lines  # 6 cycles (3 min of time)
    assert not [r for r in caplog.records if r.name == "observer.scrape.collector"]

    for _ in range(8):  # minutes 8-11:30: back
        rig.cycle()
    assert rig.fleet_gaps() == []
    ended = rig.store.get_incident(gap.id)
    assert ended is not None and ended.status is IncidentStatus.RESOLVED
    assert any("telemetry source recovered" in r.getMessage() for r in caplog.records)


def test_the_gpus_behind_a_failing_exporter_are_metered_as_unmeasured(rig: Rig) -> None:
    """The collector keeps a failing target's last page for a while (its node reads stale);
    metering must not read that old page as busy or idle time."""
    t0 = rig.handle.clock.scenario_time()
    for _ in range(10):  # minutes 0-4:30: every exporter answers
        rig.cycle()
    start = rig.handle.clock.scenario_time()
    for _ in range(6):  # minutes 5-7:30: a100-0001 answers 503
        rig.cycle()
    end = rig.handle.clock.scenario_time()
    before = {u.key: u for u in usage(rig.store, t0, start, by="node")}
    during = {u.key: u for u in usage(rig.store, start, end, by="node")}
    assert set(during) == set(before)  # every node's GPUs still counted, a100-0001's too
    node = during["a100-0001"]
    assert node.gpu_hours * 3600 == pytest.approx(8 * (end - start - STEP))
    assert node.allocated_gpu_hours > 0  # the hang job's rank runs there
    assert before["a100-0001"].busy_gpu_hours > 0  # measured while it answered
    # its failing cycles are unmeasured: not busy, not idle, not gone
    assert node.unmeasured_gpu_hours == pytest.approx(node.allocated_gpu_hours)
    assert node.busy_gpu_hours == 0 and node.idle_gpu_hours == 0
    assert all(u.unmeasured_gpu_hours == 0 for k, u in during.items() if k != "a100-0001")


def test_the_kubernetes_api_down_while_exporters_answer_is_a_fleet_gap(rig: Rig) -> None:
    for _ in range(4):
        rig.cycle()
    assert rig.fleet_gaps() == []
    rig.handle.faults.add(r"^/api", 503, count=-1)  # every Kubernetes API request: 503
    _wait(
        lambda: all(rig.kube.stats.errors.get(f"{r}:503", 0) >= 2 for r in RESOURCES),
        "every watch of the collector to fail twice",
    )
    for _ in range(3):
        rig.cycle()
    (gap,) = rig.fleet_gaps()
    assert "Kubernetes API failing" in gap.summary and "HTTP 503" in gap.summary
    said = "monitoring_gap on `fleet` opened (warning): telemetry source failing: Kubernetes API"
    assert rig.said(said) == 1
    assert rig.live.latest is not None and len(rig.live.latest.gpus) > 0  # exporters answered

    rig.handle.faults.clear()
    _wait(lambda: not rig.kube.problem(), "the collector to see the API answer again")
    for _ in range(4):
        rig.cycle()
    assert rig.fleet_gaps() == []
    ended = rig.store.get_incident(gap.id)
    assert ended is not None and ended.status is IncidentStatus.RESOLVED
    assert rig.said(said) == 1  # never announced twice
