"""Incidents: dedup by entity and kind, hysteresis on open and resolve, gaps are not health."""

from __future__ import annotations

from detectors.findings import Finding, FindingKind, Severity
from remediations.incidents import HOLDS, Change, Hysteresis, TrackerState, step
from tests.remediations.helpers import finding

H = Hysteresis(open_after=2, resolve_after=3)


def run(
    cycles: list[list[Finding]], params: Hysteresis = H
) -> tuple[TrackerState, list[list[tuple[Change, str]]]]:
    state = TrackerState("c")
    log: list[list[tuple[Change, str]]] = []
    for i, fs in enumerate(cycles):
        state, changes = step(state, fs, now=1000.0 + 30 * i, params=params)
        log.append([(c.change, c.incident.kind) for c in changes])
    return state, log


def test_warning_opens_after_k_cycles_and_dedups() -> None:
    w = finding(severity=Severity.WARNING, kind=FindingKind.GPU_THROTTLE)
    state, log = run([[w, w], [w], [w]])
    assert log == [[], [(Change.OPENED, "gpu_throttle")], []]
    assert len(list(state.open())) == 1


def test_critical_opens_at_once() -> None:
    _, log = run([[finding()]])
    assert log == [[(Change.OPENED, "gpu_xid")]]


def test_flapping_does_not_churn() -> None:
    w = finding(severity=Severity.WARNING)
    # seen, gone, seen, gone ... never two in a row: never opens
    _, log = run([[w], [], [w], [], [w], []])
    assert all(c == [] for c in log)


def test_resolves_after_n_healthy_cycles_and_survives_blips() -> None:
    c = finding()
    _, log = run([[c], [], [], [c], [], [], []])
    assert log[0] == [(Change.OPENED, "gpu_xid")]
    assert log[1] == [] and log[2] == []
    assert log[3] == [(Change.UPDATED, "gpu_xid")]  # back before resolving: same incident
    assert log[6] == [(Change.RESOLVED, "gpu_xid")]


def test_monitoring_gap_holds_incidents_open() -> None:
    c = finding(node="n1")
    gap = finding(kind=FindingKind.MONITORING_GAP, severity=Severity.WARNING, node="n1", gpu=None)
    fleet_gap = finding(kind=FindingKind.MONITORING_GAP, node=None, gpu=None)
    state, log = run([[c], [gap], [gap], [gap], [fleet_gap], [fleet_gap]])
    assert not any(ch == (Change.RESOLVED, "gpu_xid") for cy in log for ch in cy)
    assert any(t.kind == "gpu_xid" for t in state.open())


def test_severity_change_is_an_update_and_ids_are_stable() -> None:
    w = finding(severity=Severity.WARNING)
    c = finding(severity=Severity.CRITICAL)
    s1, _ = step(TrackerState("c"), [w], 1.0, H)
    s2, ch2 = step(s1, [w], 2.0, H)
    _s3, ch3 = step(s2, [c], 3.0, H)
    assert ch2[0].change is Change.OPENED and ch3[0].change is Change.UPDATED
    assert ch2[0].incident.id == ch3[0].incident.id
    again, _ = step(TrackerState("c"), [c], 9.0, H)  # a replay maps to the same incident id
    assert next(iter(again.open())).incident_id == ch2[0].incident.id


def test_restore_from_records() -> None:
    _, ch = step(TrackerState("c"), [finding()], 1.0, H)
    restored = TrackerState.from_records("c", [ch[0].incident])
    assert next(iter(restored.open())).incident_id == ch[0].incident.id


def test_a_partial_source_gap_lets_incidents_elsewhere_resolve() -> None:
    """One exporter of many down (its node has its own gap) is a fleet-level gap that holds
    nothing: an incident on a node that still reports resolves as usual."""
    c = finding(node="n1")
    partial = Finding(
        FindingKind.MONITORING_GAP, Severity.WARNING, "telemetry source failing: target n2",
        1000.0, 1000.0, evidence={HOLDS: False},
    )  # fmt: skip
    _, log = run([[c], [partial], [partial], [partial]])
    assert log[3] == [(Change.RESOLVED, "gpu_xid")]
    held = Finding(FindingKind.MONITORING_GAP, Severity.WARNING, "no telemetry", 1000.0, 1000.0)
    _, log = run([[c], [held], [held], [held]])
    assert not any(ch == (Change.RESOLVED, "gpu_xid") for cy in log for ch in cy)
