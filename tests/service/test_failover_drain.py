"""kill -9 of the leader while its drain waits on a PodDisruptionBudget, two real `gpufleet
run` replicas on one PostgreSQL journal (the simulator's API and exporters): the standby takes
the Lease, ends the dead leader's claim at once (not after the 300-s action lease), resumes the
drain at its journaled step and finishes it; every eviction is journaled once; no incident is
opened twice and Slack's outbox announces each once."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.failover import DRAIN_CRITICAL, failover_config
from remediations.store import Store
from simulator.serve import SimulationHandle
from tests.remediations.conftest import pg_url
from tests.service.failover_support import (
    assert_each_incident_once,
    audit_has,
    replicas,
    start_fleet,
    writes,
)
from tests.service.procs import wait_for

__all__ = ["pg_url"]  # the per-test PostgreSQL schema fixture
pytestmark = [pytest.mark.slow, pytest.mark.postgres]


@pytest.fixture
def handle(tmp_path: Path) -> Iterator[SimulationHandle]:
    # The fault comes 30 scenario s (4 wall s) after the replicas are up and have looked.
    h = start_fleet(tmp_path, [{"kind": "xid48_dbe", "node": "h100-0000", "gpu": 0,
                                "start": "90s"}])  # fmt: skip
    yield h
    h.stop()


def test_kill_9_during_a_drain_resumes_on_the_new_leader_at_once(
    handle: SimulationHandle, tmp_path: Path, pg_url: str
) -> None:
    cfg = failover_config(tmp_path, handle, pg_url, [DRAIN_CRITICAL])
    store = Store.open(pg_url, cluster="small")
    try:
        with replicas(cfg, tmp_path, handle) as (a, b):
            wait_for(lambda: audit_has(store, "about to evict_pods h100-0000"), 120,
                     "the leader's drain to start evicting", step=0.3)  # fmt: skip
            time.sleep(0.5)  # inside the PDB back-off now
            a.p.send_signal(signal.SIGKILL)
            killed = time.time()
            a.p.wait(timeout=10)
            (drain,) = [x for x in store.actions() if x.playbook == "drain"]
            assert drain.lease_owner == a.identity and (drain.lease_until or 0) > killed + 200

            def done() -> bool:
                x = store.get_action(drain.id)
                return x is not None and x.state.value == "done"

            wait_for(done, 90, "beta to finish the drain", step=0.5)
            rows = store.audit_log()
            b.p.send_signal(signal.SIGTERM)
            assert b.p.wait(timeout=30) == 0
        took = [r for r in rows if r.kind == "takeover" and r.action_id == drain.id]
        assert len(took) == 1
        assert f"claim of {a.identity} ended by {b.identity}" in took[0].message
        resumed = [r for r in rows if r.action_id == drain.id and r.kind == "resume"]
        assert resumed and f"resumed by {b.identity}" in resumed[0].message
        assert resumed[0].at - killed < 60  # not after the 300-s action lease
        assert len(writes(rows, "evict_pods")) == 1  # the write took effect once
        assert_each_incident_once(store, rows)
    finally:
        store.close()
