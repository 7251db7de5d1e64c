"""Remediation never blocks detection (issue 11): a drain held by a PodDisruptionBudget for 10
minutes of fleet time runs in the background executor while every detection cycle runs on
time, and its lease is renewed so a second runner never resumes it mid-drain.

The real `kubernetes` client against the simulator's Kubernetes API; the fleet clock is
simulated: the test advances it 30 s per cycle, and the actuator's back-off sleeps wait for it
(the simulated cluster itself stands still, so the second rank's PDB keeps refusing).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from errors import TemporaryError
from harness.k8s_sim import Sim, running_sim
from kube.actuator import KubeActuator
from remediations.cycle import RemediationCycle
from remediations.executor import Executor
from remediations.store import Store
from remediations.types import ActionState
from tests.remediations.helpers import finding, live_policy

T0 = 1_700_000_000.0
CYCLE = 30.0


class FleetClock:
    """Simulated fleet time: `advance` by the test, `sleep` (the actuator's back-off) waits
    until fleet time has moved on that far, or raises once the test stops."""

    def __init__(self, start: float) -> None:
        self.t = start
        self._cv = threading.Condition()
        self._stopped = False

    def now(self) -> float:
        with self._cv:
            return self.t

    def advance(self, seconds: float) -> None:
        with self._cv:
            self.t += seconds
            self._cv.notify_all()

    def sleep(self, seconds: float) -> None:
        with self._cv:
            until = self.t + seconds
            self._cv.wait_for(lambda: self._stopped or self.t >= until)
            if self._stopped:
                raise TemporaryError("the test is stopping")

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify_all()


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(tmp_path, history=5000) as s:
        yield s


def test_pdb_blocked_drain_never_delays_detection_cycles(sim: Sim, store: Store) -> None:
    fleet = FleetClock(T0)
    actuator = KubeActuator.from_kubeconfig(sim.sa_kubeconfig, clock=fleet.now, sleep=fleet.sleep)
    policy = live_policy({
        "hysteresis": {"open_after": 1},
        "gates": {"blast_radius": {"max_nodes": 3, "max_percent_of_pool": 100},
                  "protected": {"namespaces": ["kube-system"]}},
        "rules": [{"name": "drain", "match": {"kinds": ["gpu_xid"]}, "playbook": "drain",
                   "mode": "auto", "params": {"timeout": "10m", "backoff_initial": "10s",
                                              "backoff_max": "30s"}}],
    })  # fmt: skip
    loop = RemediationCycle(
        policy, store, actuator, "live", started_at=T0 - 60, clock=fleet.now, background=True,
        idle_wait=0.05,
    )  # fmt: skip
    other = Executor(policy, store, actuator, "elsewhere")
    slowest = 0.0
    cycles = 0
    checked_midway = False
    try:
        for _ in range(24):  # 12 minutes of fleet time, one cycle every 30 s
            fleet.advance(CYCLE)
            now = fleet.now()
            began = time.perf_counter()
            loop.tick([finding(node="h100-0000", first_seen=T0, last_seen=now)], now)
            slowest = max(slowest, time.perf_counter() - began)
            cycles += 1
            time.sleep(0.05)  # let the executor take its turn at this fleet time
            (drain,) = store.actions()
            if now >= T0 + 540 and not checked_midway:  # 9 minutes in: still draining
                checked_midway = True
                assert drain.state is ActionState.EXECUTING, drain
                assert drain.lease_owner == "live"
                assert drain.lease_until is not None and drain.lease_until > now  # renewed
                assert other.run(actuator.cluster_view(now), now) == []
        assert loop.worker is not None and loop.worker.settle(10.0)
    finally:
        fleet.stop()
        loop.close()
        actuator.close()
    assert checked_midway and cycles == 24
    assert slowest < 1.5, f"a detection cycle took {slowest:.2f} s of wall time"
    (drain,) = store.actions()
    assert drain.state in (ActionState.FAILED, ActionState.ROLLED_BACK), drain
    assert "disruption budget still blocks" in drain.result
    resumed = [r for r in store.audit_log() if r.kind == "resume"]
    assert resumed == []  # nobody took over the drain while it waited
    started = drain.started_at
    assert started is not None and started <= T0 + 2 * CYCLE
