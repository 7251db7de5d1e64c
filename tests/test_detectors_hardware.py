"""GPU hardware detectors on hand-built snapshots: XID, memory, throttle, interconnect."""

from __future__ import annotations

from detectors.findings import FindingKind, Severity
from detectors.gpu_interconnect import NVLINK_CRC, PCIE_REPLAY
from detectors.gpu_memory import DBE, REMAP_FAIL, SBE, UNCORR_ROWS
from detectors.signals import GPU_TEMP, SM_CLOCK, THROTTLE, UTIL, XID
from observer.fleet.catalog import XID_COUNT_METRIC
from tests.detector_replay import all_findings, first_fire, replay, steps
from tests.fleet import Fleet

T0 = 1_767_225_600.0  # a real epoch: float32 state must not lose seconds


def test_xid48_is_critical_within_one_scrape_and_holds_until_reset() -> None:
    fleet = Fleet(nodes=2).job("ml/t", [0, 1])

    def change(f: Fleet, t: float) -> None:
        f.set(XID, 48.0 if T0 + 60 <= t < T0 + 600 else 0.0, gpu=(1, 2))

    cycles = replay("gpu_xid", fleet, steps(T0, T0 + 900), change)
    assert first_fire(cycles) == T0 + 60
    found = all_findings(cycles)
    f = found[0]
    assert (f.kind, f.severity, f.node, f.gpu_uuid, f.job) == (
        FindingKind.GPU_XID,
        Severity.CRITICAL,
        "node-001",
        "GPU-001-2",
        None,
    )
    assert f.evidence["job"] == "ml/t"  # GPU kinds: entity is the GPU; the job is evidence
    assert f.evidence["xid"] == 48 and f.evidence["nvidia_action"] == "RESET_GPU"
    assert "reset" in f.recommended_action
    assert max(t for t, fs in cycles if fs) < T0 + 600  # cleared when the gauge is reset


def test_a_critical_xid_held_at_first_sight_is_reported_as_pre_existing() -> None:
    fleet = Fleet(nodes=1).set(XID, 79.0, gpu=(0, 3))  # in the gauge before gpufleet started
    found = all_findings(replay("gpu_xid", fleet, steps(T0, T0 + 90)))
    assert found and all(f.pre_existing for f in found)
    assert {f.severity for f in found} == {Severity.CRITICAL}
    assert "present before gpufleet started" in found[0].summary
    assert found[0].evidence["pre_existing"] == "present before gpufleet started"
    assert found[0].to_json()["pre_existing"] is True


def test_an_xid_that_appears_while_watching_is_not_pre_existing() -> None:
    fleet = Fleet(nodes=1)

    def change(f: Fleet, t: float) -> None:
        f.set(XID, 48.0 if t >= T0 + 60 else 0.0, gpu=(0, 3))

    found = all_findings(replay("gpu_xid", fleet, steps(T0, T0 + 120), change))
    assert found and not any(f.pre_existing for f in found)
    assert "before gpufleet" not in found[0].summary


def test_a_count_total_with_no_earlier_value_is_pre_existing_until_it_rises() -> None:
    fleet = Fleet(nodes=1).set(XID, 13.0, gpu=(0, 4)).set(XID_COUNT_METRIC, 2.0, gpu=(0, 4))

    def change(f: Fleet, t: float) -> None:
        f.set(XID_COUNT_METRIC, 2.0 if t < T0 + 90 else 3.0, gpu=(0, 4))

    cycles = replay("gpu_xid", fleet, steps(T0, T0 + 120), change)
    assert [fs[0].pre_existing for _, fs in cycles] == [True, True, True, False, False]


def test_an_xid_missing_from_the_catalog_is_a_warning_never_critical() -> None:
    for code in (7.0, 201.0, 999.0):
        fleet = Fleet(nodes=1)

        def change(f: Fleet, t: float, code: float = code) -> None:
            f.set(XID, code if t >= T0 + 30 else 0.0, gpu=(0, 0))

        found = all_findings(replay("gpu_xid", fleet, steps(T0, T0 + 90), change))
        assert found and {f.severity for f in found} == {Severity.WARNING}
        assert "unknown XID, see NVIDIA's XID catalog" in found[0].summary
        assert found[0].evidence["unknown_xid"] is True


def test_benign_xid_is_info_and_an_old_app_xid_on_first_sight_is_not_replayed() -> None:
    fleet = Fleet(nodes=1).set(XID, 31.0, gpu=(0, 1))  # present before we started watching

    def change(f: Fleet, t: float) -> None:
        f.set(XID, 43.0 if t >= T0 + 60 else 31.0, gpu=(0, 1))

    cycles = replay("gpu_xid", fleet, steps(T0, T0 + 120), change)
    found = all_findings(cycles)
    assert found and {f.severity for f in found} == {Severity.INFO}
    assert {f.evidence["xid"] for f in found} == {43}


def test_repeated_app_xid_is_seen_through_the_count_gauge_and_escalates() -> None:
    fleet = Fleet(nodes=1).set(XID, 0.0)

    def change(f: Fleet, t: float) -> None:
        if t >= T0 + 30:
            f.set(XID, 13.0, gpu=(0, 4))
            f.set(XID_COUNT_METRIC, 1.0 if t < T0 + 120 else 3.0, gpu=(0, 4))

    fleet.set(XID_COUNT_METRIC, 0.0)
    cycles = replay("gpu_xid", fleet, steps(T0, T0 + 180), change)
    sev = [fs[0].severity for _, fs in cycles if fs]
    assert sev[0] == Severity.INFO and sev[-1] == Severity.WARNING
    assert all_findings(cycles)[-1].evidence["occurrences"] == 3


def test_dbe_and_remap_failure_are_critical_but_a_counter_reset_is_not_an_error() -> None:
    fleet = Fleet(nodes=1).set(DBE, 0.0).set(SBE, 0.0).set(UNCORR_ROWS, 0.0)
    fleet.set_increase(SBE, -5000.0)  # a reset a collector missed: never errors
    assert all_findings(replay("gpu_memory", fleet, steps(T0, T0 + 90))) == []
    fleet.set(DBE, 2.0, gpu=(0, 5)).set_increase(DBE, 2.0, gpu=(0, 5))
    fleet.set(REMAP_FAIL, 1.0, gpu=(0, 6))
    found = all_findings(replay("gpu_memory", fleet, [T0]))
    by_gpu = {f.gpu_uuid: f for f in found}
    assert by_gpu["GPU-000-5"].severity == Severity.CRITICAL
    assert by_gpu["GPU-000-6"].severity == Severity.CRITICAL
    assert "remapping failed" in by_gpu["GPU-000-6"].summary


def test_a_dbe_total_with_no_earlier_value_is_pre_existing_until_new_errors() -> None:
    fleet = Fleet(nodes=1).set(DBE, 3.0, gpu=(0, 2))  # the total gpufleet finds at start

    def change(f: Fleet, t: float) -> None:
        if t >= T0 + 90:  # new uncorrectable errors while gpufleet watches
            f.set(DBE, 5.0, gpu=(0, 2)).set_increase(DBE, 2.0, gpu=(0, 2))

    cycles = replay("gpu_memory", fleet, steps(T0, T0 + 150), change)
    marks = [fs[0].pre_existing for _, fs in cycles]
    assert marks == [True, True, True, False, False, False]
    first = cycles[0][1][0]
    assert first.severity == Severity.CRITICAL  # still reported as it is
    assert "present before gpufleet started" in first.summary
    assert first.evidence["pre_existing"] == "present before gpufleet started"


def test_a_memory_error_that_appears_while_watching_is_not_pre_existing() -> None:
    fleet = Fleet(nodes=1).set(DBE, 0.0)

    def change(f: Fleet, t: float) -> None:
        if t >= T0 + 60:
            f.set(REMAP_FAIL, 1.0, gpu=(0, 1))

    found = all_findings(replay("gpu_memory", fleet, steps(T0, T0 + 120), change))
    assert found and not any(f.pre_existing for f in found)


def test_sbe_storm_and_remapped_rows_warn() -> None:
    fleet = Fleet(nodes=1).set_increase(SBE, 30.0, gpu=(0, 1))  # 30 per 60 s window
    fleet.set(UNCORR_ROWS, 600.0, gpu=(0, 2))
    found = {f.gpu_uuid: f for f in all_findings(replay("gpu_memory", fleet, [T0]))}
    assert found["GPU-000-1"].severity == Severity.WARNING
    assert found["GPU-000-2"].severity == Severity.WARNING


def test_thermal_bits_under_load_fire_after_a_minute_and_flapping_does_not() -> None:
    fleet = Fleet(nodes=2).job("ml/t", [0, 1])
    fleet.set(THROTTLE, float(0x20 | 0x40), gpu=(0, 3)).set(SM_CLOCK, 1400.0, gpu=(0, 3))
    cycles = replay("gpu_throttle", fleet, steps(T0, T0 + 150))
    assert first_fire(cycles) == T0 + 30  # the second flagged scrape (each counts 30 s)
    f = all_findings(cycles)[0]
    assert f.kind == FindingKind.GPU_THROTTLE and f.severity == Severity.WARNING
    assert "SW_THERMAL" in f.evidence["harmful_reasons"] and "cooling" in f.recommended_action

    flap = Fleet(nodes=1)

    def flapping(f: Fleet, t: float) -> None:
        f.set(THROTTLE, float(0x80) if int((t - T0) / 30) % 3 == 0 else 0.0, gpu=(0, 1))

    cyc = replay("gpu_throttle", flap, steps(T0, T0 + 600), flapping)
    assert all_findings(cyc) == []


def test_power_cap_and_idle_reasons_are_not_throttling_but_a_hot_idle_gpu_is() -> None:
    fleet = Fleet(nodes=1).set(THROTTLE, float(0x4 | 0x10 | 0x2))
    assert all_findings(replay("gpu_throttle", fleet, steps(T0, T0 + 300))) == []
    fleet.set(THROTTLE, float(0x40 | 0x1), gpu=(0, 2)).set(UTIL, 0.0, gpu=(0, 2))
    found = all_findings(replay("gpu_throttle", fleet, steps(T0, T0 + 300)))
    assert {f.gpu_uuid for f in found} == {"GPU-000-2"}
    assert "while idle" in found[0].summary


def test_clock_fallback_only_without_the_reasons_field_and_only_with_a_cause() -> None:
    """Without reason bits a slow clock needs a cause the exporter shows: heat, or a cut so
    deep only a brake makes it. A cool GPU 25 % slow is what a software power cap looks like."""
    fleet = Fleet(nodes=2).set(THROTTLE, float("nan"))
    fleet.set(SM_CLOCK, 1500.0, gpu=(1, 0)).set(GPU_TEMP, 80.0, gpu=(1, 0))  # hot, -24 %
    fleet.set(SM_CLOCK, 1000.0, gpu=(1, 1))  # cool, -49 %: a brake
    fleet.set(SM_CLOCK, 1480.0, gpu=(1, 2))  # cool, -25 %: a power cap
    fleet.set(GPU_TEMP, 80.0, gpu=(1, 3))  # hot at full clock: not throttled
    found = all_findings(replay("gpu_throttle", fleet, steps(T0, T0 + 90)))
    assert {f.gpu_uuid for f in found} == {"GPU-001-0", "GPU-001-1"}


def test_nvlink_crc_and_pcie_replay_rates() -> None:
    fleet = Fleet(nodes=1).set_increase(NVLINK_CRC, 200 * 60.0, gpu=(0, 1))
    fleet.set_increase(PCIE_REPLAY, 60.0, gpu=(0, 2))  # 60/min > 16/min budget
    fleet.set_increase(PCIE_REPLAY, 5.0, gpu=(0, 3))  # within budget
    cycles = replay("gpu_interconnect", fleet, steps(T0, T0 + 90))
    found = {f.gpu_uuid: f for f in all_findings(cycles)}
    assert set(found) == {"GPU-000-1", "GPU-000-2"}
    assert found["GPU-000-1"].evidence["nvlink_crc_per_s"] == 200.0
    assert "riser" in found["GPU-000-2"].recommended_action
