"""gpu_lost vs monitoring_gap: one silent GPU is lost; a silent node or fleet is a gap."""

from __future__ import annotations

import numpy as np
import pytest

from detectors.findings import FindingKind, Severity
from detectors.monitoring_gap import Params as GapParams
from detectors.registry import bind
from tests.detector_replay import all_findings, first_fire, replay, steps
from tests.fleet import Fleet

T0 = 1_767_225_600.0  # a real epoch: float32 state must not lose seconds


def _ages(fleet: Fleet, t: float, gone_at: float, **where: object) -> None:
    """Samples every 30 s; the selected rows stop being scraped at `gone_at`."""
    phase = (t - T0) % 30.0
    fleet.age = np.full(fleet.n, phase)
    if t >= gone_at:
        fleet.stale(t - gone_at + phase, **where)  # type: ignore[arg-type]


def test_a_gpu_whose_series_stop_is_lost_within_two_scrapes() -> None:
    fleet = Fleet(nodes=2).job("ml/t", [0, 1])
    gone = T0 + 95.0
    cycles = replay(
        "gpu_lost", fleet, steps(T0, T0 + 300, 15), lambda f, t: _ages(f, t, gone, gpu=(1, 5))
    )
    first = first_fire(cycles)
    assert first is not None and first - gone <= 60.0
    f = all_findings(cycles)[0]
    assert (f.kind, f.severity, f.node, f.gpu_uuid, f.job) == (
        FindingKind.GPU_LOST,
        Severity.WARNING,  # uncorroborated: silent for under 3 intervals
        "node-001",
        "GPU-001-5",
        None,
    )
    critical = first_fire(cycles, Severity.CRITICAL.rank)
    assert critical is not None and 90.0 <= critical - gone <= 120.0
    assert all_findings(cycles)[-1].evidence["corroboration"] == "silent_while_node_reports"
    assert f.evidence["job"] == "ml/t"  # GPU kinds: entity is the GPU; the job is evidence
    assert "reboot" in f.recommended_action
    assert all_findings(replay("monitoring_gap", fleet, [T0 + 300])) == []


@pytest.mark.parametrize(
    ("case", "critical_early"),
    [("withdrawn", True), ("old_withdrawal", False), ("xid48_elsewhere", False),
     ("not_collected", False)],
)  # fmt: skip
def test_device_plugin_withdrawal_corroborates_only_when_it_covers_the_silent_gpu(
    case: str, critical_early: bool
) -> None:
    fleet = Fleet(nodes=2)
    gone = T0 + 95.0  # XID 79: the plugin withdraws the GPU; the scrape at T0 + 90 was its last

    def change(f: Fleet, t: float) -> None:
        f.age = np.full(f.n, (t - T0) % 30.0)
        if t >= gone:
            f.stale(t - (T0 + 90.0), gpu=(1, 5))
        withdrawn = t >= gone or case == "old_withdrawal"
        f.allocatable = {} if case == "not_collected" else {0: 8, 1: 7 if withdrawn else 8}
        if case == "xid48_elsewhere" and t >= gone:
            f.set("DCGM_FI_DEV_XID_ERRORS", 48.0, gpu=(1, 2))

    cycles = replay("gpu_lost", fleet, steps(T0, T0 + 300, 15), change)
    critical = first_fire(cycles, Severity.CRITICAL.rank)
    assert critical is not None
    assert (critical - gone < 60.0) is critical_early  # the time rule needs 90-120 s
    first = next(f for f in all_findings(cycles) if f.severity is Severity.CRITICAL)
    expected = "device plugin withdrew a GPU: allocatable 7/8"
    assert (first.evidence["corroboration"] == expected) is critical_early
    assert first.evidence["node_gpus_allocatable"] == (None if case == "not_collected" else "7/8")


def test_one_missing_scrape_is_never_critical() -> None:
    fleet = Fleet(nodes=2)
    last_before = T0 + 60.0  # the scrape at T0 + 90 misses the GPU, the one at T0 + 120 has it

    def one_missed_scrape(f: Fleet, t: float) -> None:
        f.age = np.full(f.n, (t - T0) % 30.0)
        if T0 + 90.0 <= t < T0 + 120.0:
            f.stale(t - last_before, gpu=(1, 5))

    cycles = replay("gpu_lost", fleet, steps(T0 + 5, T0 + 300, 15), one_missed_scrape)
    found = all_findings(cycles)
    assert found, "a missed scrape is still reported"
    assert {f.severity for f in found} == {Severity.WARNING}
    assert "at most a warning" in found[0].evidence["corroboration"]


def test_xid_79_corroborates_a_lost_gpu_at_once() -> None:
    fleet = Fleet(nodes=2)
    fleet.set("DCGM_FI_DEV_XID_ERRORS", 79.0, gpu=(0, 2))
    found = all_findings(replay("gpu_lost", fleet, [T0]))
    assert [(f.gpu_uuid, f.severity) for f in found] == [("GPU-000-2", Severity.CRITICAL)]
    assert found[0].evidence["corroboration"] == "xid_79"
    assert found[0].pre_existing  # held in the gauge when gpufleet first saw the GPU
    assert "present before gpufleet started" in found[0].summary


def test_xid_79_raised_while_watching_is_not_pre_existing() -> None:
    fleet = Fleet(nodes=2)

    def change(f: Fleet, t: float) -> None:
        f.set("DCGM_FI_DEV_XID_ERRORS", 79.0 if t >= T0 + 30 else 0.0, gpu=(0, 2))

    found = all_findings(replay("gpu_lost", fleet, [T0, T0 + 30, T0 + 60], change))
    assert found and {(f.severity, f.pre_existing) for f in found} == {(Severity.CRITICAL, False)}


def test_a_gpu_dropped_from_the_snapshot_is_remembered_and_lost() -> None:
    fleet = Fleet(nodes=2)
    det = bind("gpu_lost")
    _, state = det.detect(fleet.snapshot(T0), None, T0)
    fleet.dropped = {fleet.pos(0, 7)}
    found, state = det.detect(fleet.snapshot(T0 + 30), state, T0 + 30)
    assert [f.gpu_uuid for f in found] == ["GPU-000-7"]
    found, state = det.detect(fleet.snapshot(T0 + 60), state, T0 + 60)
    assert [f.gpu_uuid for f in found] == ["GPU-000-7"]
    fleet.dropped = set()
    found, _ = det.detect(fleet.snapshot(T0 + 90), state, T0 + 90)
    assert found == []


def test_exporter_down_is_a_monitoring_gap_and_never_lost() -> None:
    fleet = Fleet(nodes=4)
    down = T0 + 60.0
    change = lambda f, t: _ages(f, t, down, node=2)  # noqa: E731
    times = steps(T0, T0 + 600, 30)
    assert all_findings(replay("gpu_lost", fleet, times, change)) == []
    gaps = replay("monitoring_gap", fleet, times, change)
    found = all_findings(gaps)
    assert found and {f.node for f in found} == {"node-002"}
    assert {f.severity for f in found} == {Severity.INFO}
    assert "unknown, not bad" in found[0].recommended_action


def test_exporter_marked_down_with_stale_cache_is_a_gap() -> None:
    fleet = Fleet(nodes=3)
    fleet.node_up = np.array([True, False, True])
    found = all_findings(replay("monitoring_gap", fleet, [T0]))
    assert [f.node for f in found] == ["node-001"]
    assert all_findings(replay("gpu_lost", fleet, [T0])) == []


def test_fleet_wide_scrape_gap_is_one_finding_and_no_gpu_is_judged() -> None:
    fleet = Fleet(nodes=4)
    gap = T0 + 60.0
    change = lambda f, t: _ages(f, t, gap)  # noqa: E731
    times = steps(T0, T0 + 300, 30)
    assert all_findings(replay("gpu_lost", fleet, times, change)) == []
    found = all_findings(replay("monitoring_gap", fleet, times, change))
    assert found and {f.node for f in found} == {None}
    fleet2 = Fleet(nodes=2)
    fleet2.source_ok = False
    assert all_findings(replay("gpu_lost", fleet2, [T0])) == []
    assert [f.node for f in all_findings(replay("monitoring_gap", fleet2, [T0]))] == [None]


def test_a_long_gap_stays_info_unless_configured_to_escalate() -> None:
    fleet = Fleet(nodes=3)
    times = steps(T0, T0 + 2400, 60)
    change = lambda f, t: _ages(f, t, T0, node=1)  # noqa: E731
    assert replay("monitoring_gap", fleet, times, change)[-1][1][0].severity == Severity.INFO
    params = GapParams(warn_after_seconds=1800.0)
    cycles = replay("monitoring_gap", fleet, times, change, params)
    assert cycles[-1][1][0].severity == Severity.WARNING


def test_a_single_missed_scrape_is_not_a_gap() -> None:
    fleet = Fleet(nodes=2)
    fleet.stale(50.0, node=1)  # one scrape late
    assert all_findings(replay("monitoring_gap", fleet, [T0])) == []
