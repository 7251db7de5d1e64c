"""A critical XID incident closes on the driver's verdict, not on the gauge clearing (issue 27).

dcgm-exporter's last-XID gauge keeps its code until the exporter restarts; a GPU reset does not
clear it, so gpu_xid keeps reporting the held code. Once a diagnostic passed (or a person
waived it) on the GPU or its node after the last occurrence, that held finding is no new
evidence: the incident resolves, and it opens no new one; a new occurrence does.
"""

from __future__ import annotations

from dataclasses import replace

from detectors.findings import Finding
from harness.fake_cluster import FakeCluster
from remediations.decision_journal import DecisionJournal
from remediations.incidents import Change
from remediations.store import Store
from remediations.validation import record_diagnosis
from tests.remediations.helpers import finding, live_policy

T0 = 1_700_000_000.0
NODE, GPU = "a-0001", "GPU-1"


def _xid(last_occurrence: float, t: float) -> Finding:
    f = finding(node=NODE, gpu=GPU, first_seen=T0, last_seen=t)
    return replace(f, evidence={"xid": 48, "last_occurrence": last_occurrence})


def _changes(eng: DecisionJournal, cluster: FakeCluster, f: Finding, t: float) -> set[Change]:
    return {c.change for c in eng.cycle([f], cluster.view(t), t).changes}


def test_a_passed_diagnostic_after_the_last_xid_resolves_the_held_incident(
    store: Store,
) -> None:
    cluster = FakeCluster({"a": 4})
    eng = DecisionJournal(live_policy(), store, started_at=T0 - 60)
    assert Change.OPENED in _changes(eng, cluster, _xid(T0, T0), T0)
    for k in range(1, 6):  # the gauge holds 48 after the reset: still reported, still open
        assert Change.RESOLVED not in _changes(eng, cluster, _xid(T0, T0 + 30 * k), T0 + 30 * k)
    assert [i.kind for i in store.open_incidents()] == ["gpu_xid"]
    record_diagnosis(store, T0 + 200, f"gpu/{GPU}", "passed", node=NODE, job="diag-1")
    seen = [_changes(eng, cluster, _xid(T0, T0 + 200 + 30 * k), T0 + 200 + 30 * k)
            for k in range(1, 6)]  # fmt: skip
    assert Change.RESOLVED in set().union(*seen)
    assert store.open_incidents() == []  # and the held finding opens no new incident
    # a new XID after the verdict is new evidence
    t = T0 + 400
    assert Change.OPENED in _changes(eng, cluster, _xid(t, t), t)


def test_a_failed_diagnostic_keeps_the_incident_open(store: Store) -> None:
    cluster = FakeCluster({"a": 4})
    eng = DecisionJournal(live_policy(), store, started_at=T0 - 60)
    _changes(eng, cluster, _xid(T0, T0), T0)
    record_diagnosis(store, T0 + 100, f"node/{NODE}", "failed", node=NODE, job="diag-1")
    for k in range(1, 6):
        _changes(eng, cluster, _xid(T0, T0 + 100 + 30 * k), T0 + 100 + 30 * k)
    assert [i.kind for i in store.open_incidents()] == ["gpu_xid"]
