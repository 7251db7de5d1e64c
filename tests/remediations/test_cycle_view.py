"""The live cycle decides on the cluster its own snapshot shows: the remediation cycle is handed
that view, the executor and the scheduled jobs plan against the latest one, and the actuator is
never asked to read the cluster for it (issue 26: no data climbs back up through the writer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from detectors.findings import Finding, FindingKind
from detectors.suite import DetectorSuite
from errors import TemporaryError
from gpufleet.live_cycle import LiveCycle
from observer.fleet.model import FleetSnapshot
from remediations.cycle import RemediationCycle
from remediations.policy import load_policy
from remediations.store import Store
from tests.metering.support import T0, fleet, snapshot
from tests.remediations.helpers import finding


class _WritesOnly:
    """An actuator that must not be read: every attribute but the two writes fails the test."""

    def pin(self, intent: Any) -> Any:
        return intent

    def apply(self, intent: Any, ctx: Any) -> str:
        return "done"

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the live cycle asked the actuator for {name}")


def test_the_cycle_decides_on_its_snapshot_and_keeps_the_last_complete_view(
    tmp_path: Path,
) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'j.db'}", cluster="c1")
    snap = snapshot(fleet(), T0)
    node = snap.nodes[0].name
    down = [False]

    def collect() -> FleetSnapshot:
        if down[0]:
            raise TemporaryError("Prometheus unreachable")
        return snap

    def xid(now: float) -> list[Finding]:
        return [finding(FindingKind.GPU_XID, node=node, first_seen=T0, last_seen=now)]

    cycle = RemediationCycle(load_policy(), store, _WritesOnly(), "me", started_at=T0 - 60)
    live = LiveCycle(collect, DetectorSuite.default(), cycle, extra_findings=xid)
    try:
        assert cycle.latest_view() is None  # before any cycle: nothing to plan against
        for i in range(4):
            report = live.run_once(T0 + 30 * i)
            assert report.ok, report.errors
        seen = cycle.latest_view()
        assert seen is not None and set(seen.nodes) == {n.name for n in snap.nodes}
        assert seen.pod_of_gpu  # who holds which GPU, from the snapshot
        decided = [a for a in store.actions() if a.target_nodes == (node,)]
        assert decided, store.audit_log()  # the shipped policy's shadow decision on that node
        down[0] = True
        blind = live.run_once(T0 + 150)
        assert [e.stage for e in blind.errors] == ["collect"]
        assert cycle.latest_view() is seen  # a blind cycle's guess never replaces it
    finally:
        cycle.close()
        store.close()
