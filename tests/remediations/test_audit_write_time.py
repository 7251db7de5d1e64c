"""Executor audit rows carry the time of the write they record, not the time the pass began:
a step that takes minutes (a drain waiting on a PodDisruptionBudget) is journaled as done when
it finished. The fake cluster's writes take 90 s of journal time each."""

from __future__ import annotations

from pathlib import Path

from harness.fake_cluster import FakeCluster
from remediations.capabilities import WriteContext
from remediations.cluster_view import ClusterView
from remediations.cycle import RemediationCycle
from remediations.store import Store
from remediations.types import ActionState, Intent
from tests.remediations.helpers import finding, live_policy

T0 = 1_700_000_000.0
STEP = 90.0


class SlowCluster(FakeCluster):
    def __init__(self, clock: list[float]) -> None:
        super().__init__({"p": 4})
        self.clock = clock

    def cluster_view(self, taken_at: float = 0.0) -> ClusterView:
        return self.view(taken_at)

    def apply(self, intent: Intent, ctx: WriteContext) -> str:
        self.clock[0] += STEP  # the write (say, evictions a PDB held back) takes a while
        return super().apply(intent, ctx)


def test_each_write_is_stamped_when_it_happened(tmp_path: Path) -> None:
    clock = [T0]
    store = Store.open(f"sqlite:///{tmp_path / 'j.db'}", cluster="c1")
    policy = live_policy({
        "hysteresis": {"open_after": 1},
        "rules": [{"name": "q", "match": {"kinds": ["gpu_xid"]}, "playbook": "quarantine",
                   "mode": "auto"}],
    })  # fmt: skip
    loop = RemediationCycle(
        policy, store, SlowCluster(clock), "me", started_at=T0 - 60, clock=lambda: clock[0]
    )
    try:
        loop.tick([finding(node="p-0001", first_seen=T0, last_seen=T0)], T0)
        (action,) = store.actions()
        assert action.state is ActionState.DONE, action
        rows = [r for r in store.audit_log() if r.action_id == action.id]
        writes = [r for r in rows if r.kind == "k8s_write"]
        steps = len(action.plan)
        assert steps >= 1 and len(writes) == 2 * steps
        for n, (about, did) in enumerate(zip(writes[::2], writes[1::2], strict=True)):
            assert about.message.startswith("about to") and did.message.startswith("did")
            assert about.at == T0 + n * STEP  # journaled before the write began
            assert did.at == T0 + (n + 1) * STEP  # and done once it finished
        done = [r for r in rows if "-> done" in r.message]
        assert done and done[0].at == T0 + steps * STEP
    finally:
        store.close()
