"""Two `gpufleet run` processes, one Lease on the simulator's API: only the leader acts; kill -9
the leader and the standby leads (and acts) within the lease duration; the journal shows the
two never acted at once. The survivor then stops on SIGTERM with exit 0, releasing the Lease."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.k8s_sim import small_scenario
from remediations.store import Store
from simulator.serve import SimulationHandle, start_simulation
from tests.service.procs import Proc, wait_for, write_config

LEASE = 4.0
RENEW = 1.0
pytestmark = pytest.mark.slow


@pytest.fixture
def handle(tmp_path: Path) -> Iterator[SimulationHandle]:
    sc = small_scenario(
        faults=[
            {"kind": "xid48_dbe", "node": "h100-0001", "gpu": 1, "start": "1m"},
            {"kind": "xid48_dbe", "node": "h100-0003", "gpu": 3, "start": "8m"},
        ]
    ).model_copy(update={"start": float(int(time.time()))})
    h = start_simulation(sc, speed=20.0, kubeconfig_out=tmp_path / "kubeconfig")
    yield h
    h.stop()


def test_kill_leader_standby_takes_over(handle: SimulationHandle, tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path,
        handle,
        leader_election={"enabled": True, "lease_duration": f"{LEASE}s", "renew_every": "1s"},
    )
    a = Proc(cfg, "alpha", tmp_path / "alpha.log")
    b: Proc | None = None
    try:
        a.wait_url()
        wait_for(lambda: a.ready()["role"] == "leader", 20, "alpha to lead")
        b = Proc(cfg, "beta", tmp_path / "beta.log")
        b.wait_url()
        assert b.ready()["role"] == "standby"
        wait_for(lambda: a.metric("gpufleet_cycles_total") >= 3, 20, "alpha's cycles")
        assert b.metric("gpufleet_cycles_total") == 0  # a standby only collects and detects
        assert b.metric("gpufleet_leader") == 0 and a.metric("gpufleet_leader") == 1
        assert b.get("/healthz")[0] == 200 and b.get("/readyz")[0] == 200

        a.p.send_signal(signal.SIGKILL)
        killed = time.time()
        a.p.wait(timeout=10)
        took = wait_for(lambda: b.ready()["role"] == "leader", LEASE + RENEW + 5, "beta to lead")
        assert took <= LEASE + RENEW + 1.0
        wait_for(lambda: b.metric("gpufleet_cycles_total") >= 1, 10, "beta's first cycle")

        # The 8-minute fault comes after the kill (x20: 24 s in): beta must act on it.
        store = Store.open(f"sqlite:///{tmp_path / 'journal.db'}", cluster="small")
        try:

            def beta_quarantined() -> bool:
                return any(
                    "claimed by beta" in r.message and r.target == "node/h100-0003"
                    for r in store.audit_log()
                )

            wait_for(beta_quarantined, 40, "beta to quarantine h100-0003", step=0.5)
            rows = store.audit_log()
        finally:
            store.close()
        b.p.send_signal(signal.SIGTERM)
        assert b.p.wait(timeout=30) == 0
    finally:
        a.stop()
        if b is not None:
            b.stop()

    leader_rows = [r for r in rows if r.kind == "leader"]
    assert [(r.actor, r.detail["leading"]) for r in leader_rows][:2] == [
        ("alpha", True),
        ("beta", True),
    ]
    beta_from = leader_rows[1].detail["wall"]
    assert beta_from >= killed  # beta led only after alpha was dead
    claims = [r for r in rows if "claimed by" in r.message]
    assert claims, "no action was claimed"
    for r in claims:  # every claim by the leader of its time, never both
        who = r.message.rsplit("claimed by ", 1)[1].rstrip(")")
        assert who in ("alpha", "beta")
    alpha_claims = [r for r in claims if "alpha" in r.message]
    beta_claims = [r for r in claims if "beta" in r.message]
    assert beta_claims
    assert max((r.id for r in alpha_claims), default=0) < min(r.id for r in beta_claims)
    text = (tmp_path / "beta.log").read_text()
    assert "stopped cleanly" in text or "stopping" in text
