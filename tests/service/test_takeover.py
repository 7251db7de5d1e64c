"""A process that becomes leader reads what the previous leader knew from the journal, not what
the journal held when the process started: a standby started before the fault opens no second
incident and sends no second "opened" message when it takes over; open duplicates left by
earlier failovers are adopted (the first opened stays, the others resolve as its duplicates);
an action the dead leader had claimed resumes on the new leader as soon as it leads, not after
the 300-s action lease. Two in-process services on one journal, the Lease on the simulator's
API with the real client and a manual clock."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from alerts import AlertsRuntime
from alerts.alerts_config import parse_alerts_config
from detectors.findings import Finding, FindingKind, Severity
from detectors.signals import XID
from detectors.suite import DetectorSuite
from gpufleet.live_cycle import LiveCycle
from gpufleet.service.leader import LeaderElector
from gpufleet.service.runtime import Service, ServiceParts
from gpufleet.service.service_config import ServiceConfig, TelemetryConfig
from gpufleet.service.telemetry import Telemetry
from harness.fake_cluster import FakeCluster, FNode
from harness.k8s_sim import Sim, running_sim
from harness.live_policy import QUARANTINE_CRITICAL, live_policy
from kube.jobs import api_client
from kube.lease import KubeLeaseClient
from remediations.cluster_view import ClusterView
from remediations.cycle import RemediationCycle
from remediations.policy import load_policy
from remediations.store import IncidentRecord, NewAction, Store
from remediations.types import ActionState, IncidentId, IncidentStatus, Mode, Verdict
from tests.fleet import Fleet
from tests.service.procs import wait_for
from tests.snapshot_fixtures import two_node_fleet

LEASE = 10.0
T0 = 1_767_225_600.0


class _Cluster(FakeCluster):
    def cluster_view(self, taken_at: float = 0.0) -> ClusterView:
        return self.view(taken_at)


@dataclass
class Replica:
    service: Service
    elector: LeaderElector
    lease: KubeLeaseClient
    seen_from: list[float]
    """When this process's own detectors first saw the fault (each process has its own)."""

    def cycle(self) -> None:
        self.service._cycle()


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(tmp_path) as s:
        yield s


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(f"sqlite:///{tmp_path / 'j.db'}", cluster="c1")
    yield s
    s.close()


def _xid(now: float, first_seen: float) -> Finding:
    return Finding(
        kind=FindingKind.GPU_XID,
        severity=Severity.CRITICAL,
        summary="XID 48 (double-bit ECC error) on GPU 0 of p-0000",
        first_seen=first_seen,
        last_seen=now,
        node="p-0000",
        gpu_uuid="GPU-p-0000-0",
        evidence={"xid": 48},
    )


def _replica(
    sim: Sim, store: Store, now: list[float], who: str, kubeconfig: Path | None = None
) -> Replica:
    loop = RemediationCycle(load_policy(), store, _Cluster({"p": 4}), who, started_at=now[0])
    seen: list[float] = []

    def findings(t: float) -> list[Finding]:
        seen.append(t)
        return [_xid(t, seen[0])]

    alerts = AlertsRuntime(
        parse_alerts_config({"slack": {"default_channel": "C0FLEET"}}, "t.yaml"),
        store,
        loop.engine,
        clock=lambda: now[0],
    )
    lease = KubeLeaseClient(api_client(kubeconfig or sim.kubeconfig), "gpufleet", "lead")
    elector = LeaderElector(lease, who, lease_duration=LEASE, renew_every=2.0, wall=lambda: now[0])
    parts = ServiceParts(
        cfg=ServiceConfig.model_validate({"http": {"port": 0}}),
        store=store,
        live=LiveCycle(two_node_fleet, DetectorSuite(()), loop, extra_findings=findings),
        loop=loop,
        clock=lambda: now[0],
        interval=30.0,
        identity=who,
        telemetry=Telemetry(TelemetryConfig(), who),
        elector=elector,
        alerts=alerts,
    )
    service = Service(parts)
    elector.on_change = service._leadership
    return Replica(service, elector, lease, seen)


def _opened_messages(store: Store) -> int:
    from alerts.alerts_store import AlertsStore

    rows = AlertsStore(store.engine, store.cluster).outbox()
    return sum(json.dumps(r.payload).count("opened (critical)") for r in rows)


def test_standby_started_before_the_fault_continues_the_leaders_incident(
    sim: Sim, store: Store
) -> None:
    now = [T0]
    a = _replica(sim, store, now, "alpha")
    b = _replica(sim, store, now, "beta")  # both started before the fault
    try:
        assert a.elector.try_once() and not b.elector.try_once()
        for _ in range(3):
            a.cycle()
            now[0] += 30
        opened = store.open_incidents()
        assert [i.entity_key for i in opened] == ["gpu_xid|p-0000|GPU-p-0000-0|"]
        assert _opened_messages(store) == 1

        now[0] += LEASE + 1  # alpha is gone (kill -9): its Lease expires unrenewed
        assert b.elector.try_once() and b.service.is_leader()
        assert b.service.warm_up()  # what its warm-up thread does on becoming leader
        for _ in range(3):
            b.cycle()
            now[0] += 30
        after = store.open_incidents()
        assert [i.id for i in after] == [opened[0].id]  # the same incident, carried on
        assert after[0].status is IncidentStatus.OPEN
        assert _opened_messages(store) == 1  # Slack hears "opened" once
    finally:
        a.lease.close()
        b.lease.close()


def test_an_incident_the_dead_leader_never_announced_is_announced_by_the_next(
    sim: Sim, store: Store
) -> None:
    """The journal write and the outbox write are two transactions: a leader killed between
    them leaves an open incident no message carries. The next leader says it, once."""
    now = [T0]
    a = _replica(sim, store, now, "alpha")
    b = _replica(sim, store, now, "beta")
    try:
        assert a.elector.try_once() and not b.elector.try_once()
        a.service.p.live.run_once(now[0])  # the cycle journals the incident; alpha dies before
        (opened,) = store.open_incidents()  # its alerts are written
        assert _opened_messages(store) == 0

        now[0] += LEASE + 1
        assert b.elector.try_once() and b.service.warm_up()
        # said by the new leader's warm-up (its thread, started as it became leader)
        wait_for(lambda: _opened_messages(store) == 1, 10, "the new leader to announce it")
        for _ in range(3):
            b.cycle()
            now[0] += 30
        assert [i.id for i in store.open_incidents()] == [opened.id]
        assert _opened_messages(store) == 1  # and only once
    finally:
        a.lease.close()
        b.lease.close()


def test_new_leader_adopts_duplicates_left_by_earlier_failovers(sim: Sim, store: Store) -> None:
    now = [T0 + 3600]
    key = "gpu_xid|p-0000|GPU-p-0000-0|"
    dupes = [
        IncidentRecord(
            id=IncidentId(f"inc-{n}"),
            cluster="c1",
            kind="gpu_xid",
            entity_key=key,
            node="p-0000",
            gpu_uuid="GPU-p-0000-0",
            job=None,
            status=IncidentStatus.OPEN,
            severity="critical",
            summary="XID 48",
            opened_at=T0 + 600 * n,
            updated_at=T0 + 600 * n,
            resolved_at=None,
            first_seen=T0 + 600 * n,
            last_seen=T0 + 600 * n,
            seen_cycles=1,
            healthy_cycles=0,
            evidence={},
        )
        for n in (2, 1, 3)
    ]
    store.save_incidents(dupes)
    c = _replica(sim, store, now, "gamma")
    try:
        assert c.elector.try_once() and c.service.warm_up()
        c.cycle()
        open_now = store.open_incidents()
        assert [i.id for i in open_now] == ["inc-1"]  # the first opened is adopted
        for n in (2, 3):
            i = store.get_incident(f"inc-{n}")
            assert i is not None and i.status is IncidentStatus.RESOLVED
        rows = [r for r in store.audit_log() if r.kind == "incident"]
        assert sorted(r.incident_id or "" for r in rows) == ["inc-2", "inc-3"]
        assert all("duplicate of inc-1" in r.message and r.actor == "gamma" for r in rows)
    finally:
        c.lease.close()


def test_new_leader_resumes_the_dead_leaders_claim_at_once(sim: Sim, store: Store) -> None:
    now = [T0]
    a = _replica(sim, store, now, "alpha")
    b = _replica(sim, store, now, "beta")
    try:
        assert a.elector.try_once() and not b.elector.try_once()
        action, _ = store.propose(
            NewAction(
                idempotency_key="k1",
                incident_id=IncidentId("inc-x"),
                playbook="quarantine_node",
                target="node/p-0001",
                target_nodes=("p-0001",),
                disruptive=False,
                mode=Mode.AUTO,
                rule="r",
                state=ActionState.APPROVED,
                decision=Verdict.EXECUTE,
                reasons=("test",),
                params={},
                plan=(),
                dry_run=False,
                attempt=1,
                result="",
                deadline=now[0] + 3600,
            ),
            now[0],
        )
        state = store.engine_state()
        claimed = store.claim(action, state.version, now[0], "alpha", now[0] + 300)
        assert claimed is not None  # alpha claimed it, then died (kill -9)
        now[0] += LEASE + 1
        assert b.elector.try_once() and b.service.warm_up()
        got = store.get_action(action.id)
        assert got is not None and got.lease_until is not None
        assert got.lease_until <= now[0]  # beta may resume it now, not in 289 s
        rows = [r for r in store.audit_log() if r.kind == "takeover"]
        assert len(rows) == 1 and "claim of alpha ended by beta" in rows[0].message
    finally:
        a.lease.close()
        b.lease.close()


def test_a_fault_that_begins_while_no_replica_leads_is_acted_on_like_any_other(
    sim: Sim, store: Store
) -> None:
    """The XID appears after the leader died and before the standby's Lease takeover. The
    standby kept collecting and detecting, so it saw the XID appear: evidence seen while the
    fleet was watched, quarantined automatically (not "cold start", awaiting a person)."""
    now = [T0]
    fleet = Fleet(nodes=4)
    cluster = _Cluster({})
    for i in range(4):
        cluster.nodes[f"node-{i:03d}"] = FNode(f"node-{i:03d}", {"gpufleet.io/pool": "p"})

    def replica(who: str) -> Replica:
        loop = RemediationCycle(
            live_policy([QUARANTINE_CRITICAL]), store, cluster, who, started_at=now[0]
        )
        lease = KubeLeaseClient(api_client(sim.kubeconfig), "gpufleet", "lead")
        elector = LeaderElector(
            lease, who, lease_duration=LEASE, renew_every=2.0, wall=lambda: now[0]
        )
        parts = ServiceParts(
            cfg=ServiceConfig.model_validate({"http": {"port": 0}}),
            store=store,
            live=LiveCycle(
                lambda: fleet.snapshot(now[0]), DetectorSuite.default(["gpu_xid"]), loop
            ),
            loop=loop,
            clock=lambda: now[0],
            interval=30.0,
            identity=who,
            telemetry=Telemetry(TelemetryConfig(), who),
            elector=elector,
        )
        service = Service(parts)
        elector.on_change = service._leadership
        return Replica(service, elector, lease, [])

    a, b = replica("alpha"), replica("beta")
    try:
        assert a.elector.try_once() and not b.elector.try_once()
        for _ in range(3):
            a.cycle()
            b.cycle()  # the standby collects and detects, and acts on nothing
            now[0] += 30
        assert store.open_incidents() == []
        # alpha dies; while the Lease runs out, the XID appears
        fleet.set(XID, 48.0, gpu=(1, 2))
        b.cycle()
        now[0] += LEASE + 1
        b.cycle()
        assert store.actions([ActionState.APPROVED, ActionState.AWAITING_APPROVAL]) == []
        assert b.elector.try_once() and b.service.warm_up()
        b.cycle()
        b.service.p.loop.settle(10)
        acts = [a for a in store.actions() if a.playbook == "quarantine"]
        assert len(acts) == 1, acts
        act = acts[0]
        assert act.target == "node/node-001" and act.decision is Verdict.EXECUTE
        assert not any("cold start" in r for r in act.reasons)
    finally:
        a.lease.close()
        b.lease.close()


def test_readiness_means_doing_its_job(sim: Sim, store: Store) -> None:
    """A standby is ready while it reaches the Lease (a leader holds it, or it would take it
    over itself), not while the API is down; a new leader is ready as soon as it leads with the
    journal read (its standby cycles kept its view warm), not after its first cycle."""
    now = [T0]
    a = _replica(sim, store, now, "alpha")
    b = _replica(sim, store, now, "beta")
    try:
        assert a.elector.try_once() and not b.elector.try_once()
        a.cycle()
        b.cycle()  # the standby collects and detects
        ready, body = b.service.readiness()
        assert ready and body["role"] == "standby" and body["lease_holder"] == "alpha"
        now[0] += LEASE + 1  # alpha is gone; beta takes over at its next look
        assert b.elector.try_once() and b.service.warm_up()
        ready, body = b.service.readiness()
        assert ready and body["role"] == "leader"  # before any leader cycle of its own
        assert b.service.p.live.cycles == 1

        c = _replica(sim, store, now, "gamma")
        assert not c.elector.try_once()
        assert c.service.readiness()[0]
        with socket.socket() as closed:  # a port nothing listens on: the API is unreachable
            closed.bind(("127.0.0.1", 0))
            cfg = yaml.safe_load(sim.kubeconfig.read_text())
            cfg["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{closed.getsockname()[1]}"
        cut = sim.kubeconfig.with_name("unreachable")
        cut.write_text(yaml.safe_dump(cfg))
        c.lease.close()
        c.elector.lease = c.lease = KubeLeaseClient(api_client(cut), "gpufleet", "lead")
        try:
            for _ in range(4):
                now[0] += 2.0
                assert not c.elector.try_once()
            ready, body = c.service.readiness()
            assert not ready and body["reason"] == "cannot reach the Lease"
        finally:
            c.lease.close()
    finally:
        a.lease.close()
        b.lease.close()
