"""What the two-process failover tests share: the small fleet at speed 8 behind its
PodDisruptionBudget, the pair of `gpufleet run` replicas (their config, leader election on one
journal, is harness/failover.py, which the failover benchmark starts too), and the checks every
failover must pass (no incident opened twice, each announced once, each Kubernetes write done
once).

Kept short for CI: the fleet's clock is held at scenario second `OFFSET` (pods already
running) until both replicas serve and one leads, so a fault's scenario time counts from then,
never from a process start-up that takes 3 s on a quiet machine and 10 s on a loaded one; both
replicas start at once; a 4-s Lease renewed every second."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alerts.alerts_store import AlertsStore
from harness.k8s_sim import small_scenario
from harness.live_policy import QUARANTINE_CRITICAL
from remediations.store import AuditRecord, Store
from simulator.serve import SimulationHandle, start_simulation
from tests.service.procs import Proc, wait_for

SPEED = 8.0
OFFSET = 60.0
"""Scenario seconds elapsed when the replicas are up (the fleet's pods are running by then)."""
QUARANTINE = QUARANTINE_CRITICAL


class HeldWall:
    """A wall clock that stands still until `release`, then runs on from where it stood."""

    def __init__(self) -> None:
        self._at = time.time()
        self._lag: float | None = None
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._at if self._lag is None else time.time() - self._lag

    def release(self) -> None:
        with self._lock:
            if self._lag is None:
                self._lag = time.time() - self._at


def start_fleet(
    tmp: Path, faults: Sequence[dict[str, Any]], confounders: Sequence[dict[str, Any]] = ()
) -> SimulationHandle:
    """The small fleet (both ranks of `train` on h100-0000 behind a PDB, maxUnavailable 1) at
    speed 8, held at scenario second `OFFSET` until `replicas` are up, with `faults` and
    `confounders` (scenario times, so later than `OFFSET`)."""
    sc = small_scenario(faults=list(faults), confounders=list(confounders))
    sc = sc.model_copy(update={"start": float(int(time.time()))})
    wall = HeldWall()
    return start_simulation(
        sc, speed=SPEED, kubeconfig_out=tmp / "kubeconfig", wall=wall, start_offset=OFFSET
    )


@contextmanager
def replicas(cfg: Path, tmp: Path, h: SimulationHandle) -> Iterator[tuple[Proc, Proc]]:
    """alpha and beta started together, yielded as (leader, standby) once both serve and one
    leads, when the fleet's clock is let go; both killed on the way out if still running."""
    procs = [Proc(cfg, "alpha", tmp / "alpha.log"), Proc(cfg, "beta", tmp / "beta.log")]
    try:
        for p in procs:
            p.wait_url()
        wait_for(lambda: leader_of(procs) is not None, 30, "a replica to lead")
        a = leader_of(procs)
        assert a is not None
        (b,) = [p for p in procs if p is not a]
        wall = h.clock.wall
        assert isinstance(wall, HeldWall)
        wall.release()
        yield a, b
    finally:
        for p in procs:
            p.stop()


def leader_of(procs: Sequence[Proc]) -> Proc | None:
    """The running replica that says it leads (None while none does)."""
    for p in procs:
        if p.p.poll() is None and p.ready().get("role") == "leader":
            return p
    return None


def audit_has(store: Store, text: str) -> bool:
    return any(text in r.message for r in store.audit_log())


def assert_each_incident_once(store: Store, rows: Sequence[AuditRecord]) -> None:
    """No entity has two incidents (in the journal's table or named by its audit), and
    Slack's outbox announces each incident's opening once, across every failover."""
    incidents = store.incidents() + [
        i for i in (store.get_incident(r.incident_id or "") for r in rows) if i is not None
    ]
    by_key: dict[str, set[str]] = {}
    for i in incidents:
        by_key.setdefault(i.entity_key, set()).add(i.id)
    assert all(len(ids) == 1 for ids in by_key.values()), by_key  # no incident twice
    outbox = AlertsStore(store.engine, store.cluster).outbox()
    opened = sum(json.dumps(r.payload).count(" opened (") for r in outbox)
    assert opened == len(by_key), (opened, sorted(by_key))  # each announced once


def writes(rows: Sequence[AuditRecord], verb: str) -> list[AuditRecord]:
    """The journal's rows of Kubernetes writes that took effect (`did <verb> ...`)."""
    return [r for r in rows if r.message.startswith(f"did {verb}")]
