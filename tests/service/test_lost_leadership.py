"""A replica that stops leading stops acting at once: the actuator's back-off (a drain waiting
on a PodDisruptionBudget, up to a minute per wait) ends as soon as leadership is lost, and the
executor's keep-alive refuses to go on, so the action stays at its journaled step for the next
leader instead of the old leader writing on until its back-off ends."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from errors import TemporaryError
from gpufleet.service.assembly import _sleeper
from harness.fake_cluster import FakeCluster
from remediations.capabilities import WriteContext
from remediations.cluster_view import ClusterView
from remediations.cycle import RemediationCycle
from remediations.store import Store
from remediations.types import ActionState, Intent
from tests.remediations.helpers import finding, live_policy

T0 = 1_700_000_000.0


def test_losing_leadership_ends_the_backoff() -> None:
    halt, leading = threading.Event(), threading.Event()
    leading.set()
    sleep = _sleeper(halt, leading, speed=1.0)
    threading.Timer(0.3, leading.clear).start()  # the Lease is lost 0.3 s into a 60-s wait
    began = time.monotonic()
    with pytest.raises(TemporaryError, match="no longer leads"):
        sleep(60.0)
    assert time.monotonic() - began < 30.0  # long before the back-off would have ended


class _LosesTheLeaseMidStep(FakeCluster):
    """A cluster whose write waits (as an eviction behind a PDB does) and, while it waits,
    this process loses the Lease."""

    def __init__(self, leading: list[bool]) -> None:
        super().__init__({"p": 4})
        self.leading = leading

    def cluster_view(self, taken_at: float = 0.0) -> ClusterView:
        return self.view(taken_at)

    def apply(self, intent: Intent, ctx: WriteContext) -> str:
        self.leading[0] = False
        ctx.alive()  # the keep-alive before the next back-off
        return super().apply(intent, ctx)


def test_the_keepalive_of_a_replica_that_no_longer_leads_stops_the_step(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'j.db'}", cluster="c1")
    leading = [True]
    policy = live_policy({
        "hysteresis": {"open_after": 1},
        "rules": [{"name": "q", "match": {"kinds": ["gpu_xid"]}, "playbook": "quarantine",
                   "mode": "auto"}],
    })  # fmt: skip
    loop = RemediationCycle(policy, store, _LosesTheLeaseMidStep(leading), "old", started_at=T0)
    loop.gate(lambda: leading[0])
    try:
        loop.tick([finding(node="p-0001", first_seen=T0, last_seen=T0)], T0)
        (action,) = store.actions()
        assert action.state is ActionState.EXECUTING and action.progress == 0
        retried = [r.message for r in store.audit_log() if "will be retried" in r.message]
        assert retried and "old no longer leads" in retried[0]
        assert not [r for r in store.audit_log() if r.message.startswith("did ")]
    finally:
        store.close()
