"""kill -9 of the leader while its drain waits on a PodDisruptionBudget, two real `gpufleet
run` replicas on one PostgreSQL journal (the simulator's API and exporters): the standby takes
the Lease, ends the dead leader's claim at once (not after the 300-s action lease), resumes the
drain at its journaled step and finishes it; every eviction is journaled once; no incident is
opened twice and Slack's outbox announces each once."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from alerts.store import AlertsStore
from remediations.store import Store
from simulator.serve import SimulationHandle, start_simulation
from tests.k8s_sim_support import small_scenario
from tests.remediations.conftest import pg_url
from tests.service.procs import Proc, wait_for

__all__ = ["pg_url"]  # the per-test PostgreSQL schema fixture
pytestmark = [pytest.mark.slow, pytest.mark.postgres]
LEASE = 4.0


@pytest.fixture
def handle(tmp_path: Path) -> Iterator[SimulationHandle]:
    # As in test_sigterm: both ranks of `train` on h100-0000 behind a PDB (maxUnavailable 1).
    # The fault comes 40 wall seconds in, well after the leader's first look.
    sc = small_scenario(
        faults=[{"kind": "xid48_dbe", "node": "h100-0000", "gpu": 0, "start": "160s"}]
    ).model_copy(update={"start": float(int(time.time()))})
    h = start_simulation(sc, speed=4.0, kubeconfig_out=tmp_path / "kubeconfig")
    yield h
    h.stop()


def _config(tmp: Path, h: SimulationHandle, url: str) -> Path:
    assert h.kubeconfig is not None
    policy = {
        "version": 1,
        "actuation": "live",
        "gates": {"blast_radius": {"max_nodes": 4, "max_percent_of_pool": 100}},
        "rules": [
            {"name": "drain-critical",
             "match": {"kinds": ["gpu_xid", "gpu_memory"], "severities": ["critical"]},
             "playbook": "drain", "mode": "auto",
             "params": {"timeout": "10m", "backoff_initial": "4s"}},
        ],
    }  # fmt: skip
    (tmp / "policy.yaml").write_text(yaml.safe_dump(policy))
    cfg = {
        "cluster": h.scenario.cluster,
        "store_url": url,
        "kubeconfig": str(h.kubeconfig),
        "policy": str(tmp / "policy.yaml"),
        "service": {
            "interval": h.scenario.scrape_interval / h.clock.speed,
            "source": {"discovery_url": f"{h.metrics_url}/targets"},
            "http": {"host": "127.0.0.1", "port": 0},
            "leader_election": {"enabled": True, "lease_duration": f"{LEASE:.0f}s",
                                "renew_every": "1s"},
        },
    }  # fmt: skip
    path = tmp / "gpufleet.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_kill_9_during_a_drain_resumes_on_the_new_leader_at_once(
    handle: SimulationHandle, tmp_path: Path, pg_url: str
) -> None:
    cfg = _config(tmp_path, handle, pg_url)
    store = Store.open(pg_url, cluster="small")
    a = Proc(cfg, "alpha", tmp_path / "alpha.log")
    b: Proc | None = None
    try:
        a.wait_url()
        wait_for(lambda: a.ready()["role"] == "leader", 30, "alpha to lead")
        b = Proc(cfg, "beta", tmp_path / "beta.log")
        b.wait_url()

        def evicting() -> bool:
            return any("about to evict_pods h100-0000" in r.message for r in store.audit_log())

        wait_for(evicting, 120, "alpha's drain to start evicting", step=0.3)
        time.sleep(0.5)  # inside the PDB back-off now
        a.p.send_signal(signal.SIGKILL)
        killed = time.time()
        a.p.wait(timeout=10)
        (drain,) = [x for x in store.actions() if x.playbook == "drain"]
        assert drain.lease_owner == "alpha" and (drain.lease_until or 0) > killed + 200

        def done() -> bool:
            x = store.get_action(drain.id)
            return x is not None and x.state.value == "done"

        wait_for(done, 90, "beta to finish the drain", step=0.5)
        rows = store.audit_log()
        b.p.send_signal(signal.SIGTERM)
        assert b.p.wait(timeout=30) == 0
    finally:
        a.stop()
        if b is not None:
            b.stop()
    try:
        took = [r for r in rows if r.kind == "takeover" and r.action_id == drain.id]
        assert len(took) == 1 and "claim of alpha ended by beta" in took[0].message
        resumed = [r for r in rows if r.action_id == drain.id and r.kind == "resume"]
        assert resumed and "resumed by beta" in resumed[0].message
        assert resumed[0].at - killed < 60  # not after the 300-s action lease
        evicted = [r for r in rows if r.message.startswith("did evict_pods")]
        assert len(evicted) == 1  # the write took effect once
        incidents = store.open_incidents() + [
            i for i in (store.get_incident(r.incident_id or "") for r in rows) if i is not None
        ]
        by_key: dict[str, set[str]] = {}
        for i in incidents:
            by_key.setdefault(i.entity_key, set()).add(i.id)
        assert all(len(ids) == 1 for ids in by_key.values()), by_key  # no incident twice
        outbox = AlertsStore(store.engine, store.cluster).outbox()
        opened = sum(json.dumps(r.payload).count(" opened (") for r in outbox)
        assert opened == len(by_key)  # each incident announced once, across the failover
    finally:
        store.close()
