"""SIGTERM while a drain waits on a PodDisruptionBudget: the back-off ends at once, the action
stays parked in the journal at its step, the Lease is released, the process exits 0; the next
`gpufleet run` resumes the parked drain and finishes it."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from harness.k8s_sim import small_scenario
from remediations.store import Store
from simulator.serve import SimulationHandle, start_simulation
from tests.service.procs import Proc, wait_for, write_config

pytestmark = pytest.mark.slow


@pytest.fixture
def handle(tmp_path: Path) -> Iterator[SimulationHandle]:
    # Both ranks of `train` sit on h100-0000 behind a PDB with maxUnavailable 1: the drain
    # evicts one, then waits (back-off) until its replacement runs, 30 scenario seconds later.
    # The fault starts 15 wall seconds in, once the process runs its cycles (an XID already
    # present at gpufleet's first look is cold-start evidence: it never acts automatically).
    sc = small_scenario(
        faults=[{"kind": "xid48_dbe", "node": "h100-0000", "gpu": 0, "start": "60s"}]
    ).model_copy(update={"start": float(int(time.time()))})
    h = start_simulation(sc, speed=4.0, kubeconfig_out=tmp_path / "kubeconfig")
    yield h
    h.stop()


def _drain_policy(path: Path) -> None:
    policy = yaml.safe_load(path.read_text())
    policy["rules"] = [
        {
            "name": "drain-critical",
            "match": {"kinds": ["gpu_xid", "gpu_memory"], "severities": ["critical"]},
            "playbook": "drain",
            "mode": "auto",
            "params": {"timeout": "10m", "backoff_initial": "4s"},
        }
    ]
    path.write_text(yaml.safe_dump(policy))


def test_sigterm_parks_the_write_releases_the_lease_and_exits_0(
    handle: SimulationHandle, tmp_path: Path
) -> None:
    cfg = write_config(
        tmp_path,
        handle,
        interval=1.0,
        leader_election={"enabled": True, "lease_duration": "10s", "renew_every": "2s"},
    )
    _drain_policy(tmp_path / "policy.yaml")
    store = Store.open(f"sqlite:///{tmp_path / 'journal.db'}", cluster="small")
    first = Proc(cfg, "first", tmp_path / "first.log")
    second: Proc | None = None
    try:
        first.wait_url()

        def evicting() -> bool:
            return any("about to evict_pods h100-0000" in r.message for r in store.audit_log())

        wait_for(evicting, 60, "the drain to start evicting", step=0.3)
        time.sleep(0.5)  # inside the PDB back-off now
        t0 = time.monotonic()
        first.p.send_signal(signal.SIGTERM)
        assert first.p.wait(timeout=30) == 0
        assert time.monotonic() - t0 < 10
        (action,) = [a for a in store.actions() if a.playbook == "drain"]
        assert action.state.value == "executing"  # parked at its step, not failed
        assert action.progress == 1 and action.step_started == 1
        retried = [r.message for r in store.audit_log() if "will be retried" in r.message]
        assert any("stopping" in m for m in retried), retried
        lease = handle.cluster.store.get("leases", "gpufleet", "gpufleet-leader")
        assert lease is not None and not lease["spec"].get("holderIdentity")  # released
        assert "stopped cleanly" in first.log.read_text()
        parked = [r.message for r in store.audit_log() if r.kind == "park"]
        assert parked and "parked by first at step 1" in parked[0]

        second = Proc(cfg, "second", tmp_path / "second.log")
        second.wait_url()

        def resumed_and_done() -> bool:
            a = store.get_action(action.id)
            return a is not None and a.state.value == "done"

        wait_for(resumed_and_done, 90, "the second process to finish the drain", step=0.5)
        resumed = [r.message for r in store.audit_log() if r.message.startswith("resumed by")]
        assert resumed and "second" in resumed[0]
        evicted = [r for r in store.audit_log() if r.message.startswith("did evict_pods")]
        assert len(evicted) == 1  # the write took effect once
    finally:
        first.stop()
        if second is not None:
            second.stop()
        store.close()
