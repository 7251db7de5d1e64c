"""Remediation never blocks detection, in the service (issue 11): `gpufleet run`'s drain waits
on a PodDisruptionBudget in the background executor while the detection cycles keep their
cadence (checked on the service's own cycle reports); shutdown then stops the executor thread,
parks the drain at its journaled step and exits 0.

The service is `build()` as `gpufleet run` assembles it, against a simulation served in this
process: both ranks of `train` sit on h100-0000 behind a PDB (maxUnavailable 1); a replacement
pod takes 300 scenario seconds (30 wall seconds at speed 10) to become ready, so after the first
eviction the drain waits on the budget far longer than a cycle. The fault starts 10 wall seconds
in, after the service's first cycles (evidence present before gpufleet watched never acts).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.config import GpufleetConfig
from gpufleet.live_cycle import CycleReport
from gpufleet.service.assembly import build
from gpufleet.service.runtime import Service
from harness.k8s_sim import small_scenario
from harness.live_policy import live_policy
from observer.scrape.collector import ScrapeSettings
from remediations.store import Store
from remediations.types import ActionState
from simulator.cluster import ClusterOptions
from simulator.serve import SimulationHandle, start_simulation
from tests.service.procs import wait_for

SPEED = 10.0
INTERVAL = 0.5
"""Wall seconds between cycle starts."""


@pytest.fixture
def handle(tmp_path: Path) -> Iterator[SimulationHandle]:
    sc = small_scenario(
        faults=[{"kind": "xid48_dbe", "node": "h100-0000", "gpu": 0, "start": "100s"}]
    ).model_copy(update={"start": float(int(time.time()))})
    h = start_simulation(
        sc,
        speed=SPEED,
        kubeconfig_out=tmp_path / "kubeconfig",
        options=ClusterOptions(startup_seconds=300.0),
        bookmark_interval=0.5,
    )
    yield h
    h.stop()


def test_pdb_blocked_drain_keeps_the_cycle_cadence(
    handle: SimulationHandle, tmp_path: Path
) -> None:
    cfg = GpufleetConfig.model_validate(
        {"cluster": "small", "store_url": f"sqlite:///{tmp_path / 'j.db'}",
         "service": {"http": {"port": 0}, "shutdown_timeout": "10s"}}
    )  # fmt: skip
    drain = {
        "name": "drain-critical",
        "match": {"kinds": ["gpu_xid", "gpu_memory"], "severities": ["critical"]},
        "playbook": "drain",
        "mode": "auto",
        "params": {"timeout": "10m", "backoff_initial": "5s", "backoff_max": "10s"},
    }
    store = Store.open(cfg.store_url, cluster="small")
    parts, _ = build(
        cfg,
        live_policy([drain]),
        "bg",
        store=store,
        kubeconfig=str(handle.kubeconfig),
        scrape=ScrapeSettings(discovery_url=f"{handle.metrics_url}/targets", cluster="small"),
        clock=handle.clock,
        interval=INTERVAL,
        speed=SPEED,
    )
    reports: list[tuple[float, CycleReport]] = []
    parts.on_report = lambda r: reports.append((time.monotonic(), r))
    svc = Service(parts).start()
    stopped = False
    try:

        def evicting() -> bool:
            return any("about to evict_pods h100-0000" in r.message for r in store.audit_log())

        wait_for(evicting, 60, "the drain to start evicting", step=0.2)
        began = time.monotonic()
        time.sleep(8.0)  # 80 scenario seconds: the budget blocks the second rank throughout
        ended = time.monotonic()
        (action,) = [a for a in store.actions() if a.playbook == "drain"]
        assert action.state is ActionState.EXECUTING, action  # still waiting on the PDB
        assert action.lease_owner == "bg" and (action.lease_until or 0) > handle.clock()
        during = [t for t, _ in reports if began <= t <= ended]
        assert len(during) >= 8, f"only {len(during)} cycles in 8 s at a {INTERVAL} s interval"
        gaps = [b - a for a, b in zip([began, *during], [*during, ended], strict=True)]
        assert max(gaps) < 2.0, f"a cycle came {max(gaps):.1f} s late while the drain waited"
        assert all(r.ok for t, r in reports if began <= t <= ended)
        assert parts.loop.worker is not None and parts.loop.worker.running

        stopped = True
        t0 = time.monotonic()
        assert svc.shutdown() == 0
        assert time.monotonic() - t0 < 10
        assert not parts.loop.worker.running
        assert [a.playbook for a in parts.loop.worker.touched] == ["drain"]  # its pass ended
        (parked,) = [a for a in store.actions() if a.playbook == "drain"]
        assert parked.state is ActionState.EXECUTING and parked.progress == 1
        assert parked.lease_until is not None and parked.lease_until <= handle.clock()
        assert any(r.kind == "park" and "parked by bg" in r.message for r in store.audit_log())
    finally:
        if not stopped:
            svc.shutdown()
