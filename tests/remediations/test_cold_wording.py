"""Incident summaries say cold start on the product's clock: evidence a detector found already
there is "present before gpufleet first watched this fleet at <the journal's first watch>"
on a fresh install, and carries no such note when a process that took over (or restarted)
first saw it on a fleet the journal says was watched before. The findings are the real XID
detector's, on a snapshot whose last-XID gauge holds 79 at first sight."""

from __future__ import annotations

from detectors.findings import Finding
from detectors.signals import XID
from harness.fake_cluster import FakeCluster
from remediations.decision_journal import DecisionJournal
from remediations.store import Store
from tests.detector_replay import all_findings, replay, steps
from tests.fleet import Fleet
from tests.remediations.helpers import live_policy

T0 = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC
OLD = "present before gpufleet started"


def _held_xid(t: float) -> list[Finding]:
    """What the XID detector says at its first look at a GPU whose gauge already holds 79."""
    fleet = Fleet(nodes=1).set(XID, 79.0, gpu=(0, 3))
    found = all_findings(replay("gpu_xid", fleet, steps(t, t + 30)))
    assert found and all(f.pre_existing and OLD in f.summary for f in found)
    return found


def _summaries(eng: DecisionJournal, findings: list[Finding], t: float) -> list[str]:
    cluster = FakeCluster({"node": 2})
    for i, f in enumerate(findings):
        eng.cycle([f], cluster.view(t + 30 * i), t + 30 * i)
    return [i.summary for i in eng.store.open_incidents()]


def test_cold_start_wording_names_the_fleets_first_watch(store: Store) -> None:
    eng = DecisionJournal(live_policy(), store, started_at=T0 - 60)
    assert eng.first_look(T0, "one") is False  # a fresh install: this is the first watch
    (summary,) = _summaries(eng, _held_xid(T0), T0)
    assert "present before gpufleet first watched this fleet at 2026-01-01 00:00:00 UTC" in summary
    assert OLD not in summary
    (inc,) = store.open_incidents()
    assert inc.evidence["pre_existing"] == (
        "present before gpufleet first watched this fleet at 2026-01-01 00:00:00 UTC"
    )


def test_a_fault_a_new_leader_first_sees_is_not_called_pre_existing(store: Store) -> None:
    first = DecisionJournal(live_policy(), store, started_at=T0 - 60)
    first.first_look(T0, "one")  # the fleet was watched from T0
    later = T0 + 14 * 60  # a standby takes over; the fault began in the leaderless gap
    second = DecisionJournal(live_policy(), store, started_at=later - 60)
    assert second.first_look(later, "two") is True
    (summary,) = _summaries(second, _held_xid(later), later)
    assert "present before" not in summary and summary.startswith("XID 79")
    (inc,) = store.open_incidents()
    assert inc.evidence["pre_existing"] is None
