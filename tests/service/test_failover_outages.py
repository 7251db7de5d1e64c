"""The failover suite (issue 29): two real `gpufleet run` replicas with leader election on one
PostgreSQL journal, against the simulator's API and exporters at speed 8, through the outages
a fleet really has. Each test asserts on the journal (audit rows, actions, incidents), Slack's
outbox and the Kubernetes objects the simulator holds.

- exporter outage (every exporter 503), the leader killed in the middle of it: one fleet-level
  monitoring_gap incident, announced once, adopted by the new leader, resolved on return; no
  Kubernetes write;
- store outage (the journal's connections reset and refused, through a TCP proxy in front of
  the shared PostgreSQL): both replicas survive, one line a minute in total (not one per
  worker) instead of a traceback per cycle, no journal row lost, and the fault that began
  meanwhile is quarantined once after;
- Kubernetes API outage during a drain: no replica leads while the API is down (both report
  not ready), and once it returns the drain finishes within a minute, each eviction once;
- a fault that begins while no replica leads: acted on automatically by the next leader, not
  held as cold start."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.failover import DRAIN_CRITICAL, LEASE, failover_config
from remediations.store import Store
from remediations.types import ActionState, IncidentStatus
from simulator.serve import SimulationHandle
from tests.remediations.conftest import pg_url
from tests.service.failover_support import (
    QUARANTINE,
    assert_each_incident_once,
    audit_has,
    leader_of,
    replicas,
    start_fleet,
    writes,
)
from tests.service.procs import Proc, wait_for
from tests.tcp_proxy import TcpProxy

__all__ = ["pg_url"]  # the per-test PostgreSQL schema fixture
pytestmark = [pytest.mark.slow, pytest.mark.postgres]
FLEET_GAP = "monitoring_gap|||"
NODES = ("h100-0000", "h100-0001", "h100-0002", "h100-0003")


@pytest.fixture
def journal(pg_url: str) -> Iterator[Store]:
    store = Store.open(pg_url, cluster="small")
    yield store
    store.close()


def _unschedulable(h: SimulationHandle, node: str) -> bool:
    return bool(h.cluster.get("nodes", "", node)["spec"].get("unschedulable"))


def _cut_api(h: SimulationHandle, *procs: Proc) -> None:
    """Every Kubernetes API request answers 503 from now on; returns once nobody leads (the
    Lease cannot be renewed, so the leader steps down)."""
    h.faults.add(r"^/api", 503, count=-1)
    wait_for(lambda: leader_of(procs) is None, 4 * LEASE, "the leader to step down")


def _done(journal: Store, target: str) -> bool:
    """An action on `target` finished."""
    return any(x.state is ActionState.DONE for x in journal.actions() if x.target == target)


def _scenario_seconds(h: SimulationHandle) -> float:
    return h.clock.scenario_time() - h.scenario.start


def _no_traceback(*procs: Proc) -> None:
    for p in procs:
        assert "Traceback" not in p.log.read_text(), p.log.read_text()[-3000:]


def _wait_scenario(h: SimulationHandle, seconds: float) -> None:
    wait_for(lambda: _scenario_seconds(h) >= seconds, 120, f"scenario second {seconds:.0f}")


def test_exporter_outage_across_a_failover_is_one_gap_said_once(
    tmp_path: Path, pg_url: str, journal: Store
) -> None:
    down = [{"kind": "exporter_down", "node": n, "start": "90s", "end": "180s"} for n in NODES]
    h = start_fleet(tmp_path, [], down)
    try:
        cfg = failover_config(tmp_path, h, pg_url, [QUARANTINE])
        with replicas(cfg, tmp_path, h) as (a, b):

            def gap_open() -> bool:
                return any(i.entity_key == FLEET_GAP for i in journal.open_incidents())

            wait_for(gap_open, 60, "the fleet-level monitoring_gap incident", step=0.5)
            (gap,) = [i for i in journal.open_incidents() if i.entity_key == FLEET_GAP]
            assert "h100-0000" in gap.summary and "HTTP 503" in gap.summary  # the cause
            a.p.send_signal(signal.SIGKILL)  # the leader dies in the middle of the outage
            a.p.wait(timeout=10)
            wait_for(lambda: b.ready()["role"] == "leader", 3 * LEASE, "beta to lead")

            def resolved() -> bool:
                i = journal.get_incident(gap.id)
                return i is not None and i.status is IncidentStatus.RESOLVED

            wait_for(resolved, 60, "the gap to resolve once the exporters answer", step=0.5)
            rows = journal.audit_log()
            _no_traceback(b)
        gaps = {i.id for i in journal.incidents() if i.entity_key == FLEET_GAP}
        assert gaps == {gap.id}  # the new leader continued it, never opened a second one
        assert_each_incident_once(journal, rows)
        assert writes(rows, "") == []  # missing telemetry is never evidence: nothing written
        assert not any(_unschedulable(h, n) for n in NODES)
    finally:
        h.stop()


def test_store_outage_is_survived_and_the_fault_it_hid_is_acted_on_once(
    tmp_path: Path, pg_url: str, journal: Store
) -> None:
    fault = [{"kind": "xid48_dbe", "node": "h100-0001", "gpu": 1, "start": "100s"}]
    h = start_fleet(tmp_path, fault)
    proxy = TcpProxy("127.0.0.1", 5432)
    try:
        via_proxy = pg_url.replace("@127.0.0.1:5432/", f"@127.0.0.1:{proxy.port}/")
        cfg = failover_config(tmp_path, h, via_proxy, [QUARANTINE])
        with replicas(cfg, tmp_path, h) as (a, b):
            wait_for(lambda: audit_has(journal, "gpufleet started watching"), 30, "first look")
            assert _scenario_seconds(h) < 100, "too slow to cut the store before the fault"
            before = {r.id for r in journal.audit_log()}
            proxy.cut()  # the journal is gone: connections reset, new ones refused
            _wait_scenario(h, 160)  # the fault began 40 scenario s (5 s) into the outage
            assert a.p.poll() is None and b.p.poll() is None  # both survive it
            proxy.restore()

            wait_for(lambda: _done(journal, "node/h100-0001"), 90, "the quarantine", step=0.5)
            rows = journal.audit_log()
            _no_traceback(a, b)
            lines = a.log.read_text().splitlines()
            said = [ln for ln in lines if "store failing" in ln]
            # one line a minute in total (the cycle and the executor share one registry), not
            # one per cycle nor one per worker; the outage lasts < 60 s; one line when it ends
            assert len(said) == 1, said
            assert sum("store recovered" in ln for ln in lines) == 1
            assert b.log.read_text().count("store failing") <= 2  # the standby's first look
        assert before <= {r.id for r in rows}  # no journal row lost
        assert _unschedulable(h, "h100-0001")
        did = writes(rows, "")
        assert len(did) == len({(r.message.split(":")[0]) for r in did}) >= 1  # each write once
        assert all("h100-0001" in r.message for r in did)
        assert_each_incident_once(journal, rows)
    finally:
        proxy.stop()
        h.stop()


def test_api_outage_during_a_drain_then_the_drain_finishes_at_once(
    tmp_path: Path, pg_url: str, journal: Store
) -> None:
    fault = [{"kind": "xid48_dbe", "node": "h100-0000", "gpu": 0, "start": "90s"}]
    h = start_fleet(tmp_path, fault)
    try:
        cfg = failover_config(tmp_path, h, pg_url, [DRAIN_CRITICAL])
        with replicas(cfg, tmp_path, h) as (a, b):
            wait_for(lambda: audit_has(journal, "about to evict_pods h100-0000"), 60,
                     "the drain to start evicting", step=0.3)  # fmt: skip
            _cut_api(h, a, b)
            time.sleep(LEASE)
            assert leader_of([a, b]) is None  # nobody leads without the Lease
            assert a.get("/readyz")[0] == 503 and b.get("/readyz")[0] == 503
            h.faults.clear()
            back = time.time()
            (drain,) = [x for x in journal.actions() if x.playbook == "drain"]

            def done() -> bool:
                x = journal.get_action(drain.id)
                return x is not None and x.state is ActionState.DONE

            wait_for(done, 120, "the drain to finish after the API returns", step=0.5)
            finished = time.time()
            rows = journal.audit_log()
        resumed = [r for r in rows if r.action_id == drain.id and r.kind == "resume"]
        assert resumed and resumed[-1].at - back < 60  # not after the 300-s action lease
        assert finished - back < 120
        assert len(writes(rows, "evict_pods")) == 1  # each eviction took effect once
        assert_each_incident_once(journal, rows)
    finally:
        h.stop()


def test_a_fault_that_begins_while_no_replica_leads_is_acted_on(
    tmp_path: Path, pg_url: str, journal: Store
) -> None:
    fault = [{"kind": "xid48_dbe", "node": "h100-0002", "gpu": 2, "start": "140s"}]
    h = start_fleet(tmp_path, fault)
    try:
        cfg = failover_config(tmp_path, h, pg_url, [QUARANTINE])
        with replicas(cfg, tmp_path, h) as (a, b):
            wait_for(lambda: audit_has(journal, "gpufleet started watching"), 30, "first look")
            assert _scenario_seconds(h) < 100, "too slow to cut the API before the fault"
            _cut_api(h, a, b)
            assert _scenario_seconds(h) < 140, "the leader stepped down after the fault began"
            _wait_scenario(h, 140 + 40)  # the XID began, and was seen, with nobody leading
            assert leader_of([a, b]) is None
            h.faults.clear()

            wait_for(lambda: _done(journal, "node/h100-0002"), 60, "the quarantine", step=0.5)
            rows = journal.audit_log()
        actions = [x for x in journal.actions() if x.target == "node/h100-0002"]
        assert all(not any("cold start" in r for r in x.reasons) for x in actions)
        assert not [x for x in actions if x.state is ActionState.AWAITING_APPROVAL]
        assert _unschedulable(h, "h100-0002")
        ours = [i for i in journal.incidents() if i.node == "h100-0002"]
        assert ours and not [i for i in ours if "present before" in i.summary]
        assert_each_incident_once(journal, rows)
    finally:
        h.stop()
