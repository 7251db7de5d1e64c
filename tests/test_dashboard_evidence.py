"""Incident evidence as a person reads it: one panel per metric, each in its own units, with
this GPU against the peers the detector compared it with and its threshold."""

from __future__ import annotations

from dashboards.views.evidence import field_unit, panel, panels, stem, thresholds_by_field
from detectors.signals import GPU_TEMP, SM_CLOCK, THROTTLE, UTIL
from tests.detector_replay import all_findings, replay, steps
from tests.fleet import Fleet
from tests.test_detectors_hardware import T0

STRAGGLER = {
    "device": 0, "rank": 2, "signal": "tensor", "activity": 0.624, "job_median_activity": 0.529,
    "node_peers_median_activity": 0.519, "sm_clock_mhz": 1980.0,
    "job_median_sm_clock_mhz": 1980.0, "power_w": 617.6, "peers": 32, "min_gap": 0.07,
    "persisted_s": 180.0, "evidence_gap_s": 9.04, "threshold_gap_s": 9.04,
}  # fmt: skip


def test_a_stragglers_activity_is_not_drawn_on_the_clocks_axis() -> None:
    by = {m: f for m, f in panels(STRAGGLER)}
    assert set(by) == {"activity", "sm_clock_mhz", "gap_s"}
    act = by["activity"].set_index("field")
    assert act.loc["activity", "role"] == "this entity"
    assert set(act.loc[["job_median_activity", "node_peers_median_activity"], "role"]) == {"peers"}
    assert act["value"].max() < 1.0  # no MHz beside a fraction
    assert by["sm_clock_mhz"]["unit"].iloc[0] == "MHz"
    gap = by["gap_s"].set_index("field")
    assert gap.loc["threshold_gap_s", "role"] == "threshold" and gap["unit"].iloc[0] == "s"


def test_a_throttled_gpu_is_compared_with_its_models_busy_median() -> None:
    ev = {"device": 6, "sm_clock_mhz": 345.0, "model_busy_median_mhz": 1980.0, "util": 0.0}
    (only,) = panels(ev)
    assert only[0] == "sm_clock_mhz" and stem("model_busy_median_mhz") == "sm_clock_mhz"
    assert sorted(only[1]["role"]) == ["peers", "this entity"]


def test_each_history_chart_draws_only_the_thresholds_in_its_own_unit() -> None:
    fields = ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP")
    ev = {"gpu_temp_c": 91.0, "threshold_temp_c": 85.0, "min_sm_clock_mhz": 1200.0,
          "threshold_s": 60.0, "min_gap": 0.07}  # fmt: skip
    drawn, apart = thresholds_by_field(fields, ev)
    # The old page drew every threshold on the first chart (the clock-reason bitmask here).
    assert drawn["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] == {}
    assert drawn["DCGM_FI_DEV_SM_CLOCK"] == {"min_sm_clock_mhz": 1200.0}
    assert drawn["DCGM_FI_DEV_GPU_TEMP"] == {"threshold_temp_c": 85.0}
    assert apart == {"threshold_s": 60.0, "min_gap": 0.07}  # seconds, a relative gap: no chart
    assert [field_unit(f) for f in fields] == ["bitmask", "MHz", "°C"]


def test_a_hot_idle_gpu_on_a_small_fleet_still_shows_its_comparison() -> None:
    """The demo's throttle: reason bits on an idle GPU, too few busy peers for the clock
    baseline. The old evidence held no peers' value, so the page drew no comparison at all."""
    fleet = Fleet(nodes=1).set(THROTTLE, float(0x20 | 0x40), gpu=(0, 6))
    fleet.set(UTIL, 0.0, gpu=(0, 6)).set(SM_CLOCK, 345.0, gpu=(0, 6))
    fleet.set(GPU_TEMP, 92.0, gpu=(0, 6))
    f = all_findings(replay("gpu_throttle", fleet, steps(T0, T0 + 120)))[-1]
    by = {m: frame.set_index("field") for m, frame in panels(f.evidence)}
    clock, temp = by["sm_clock_mhz"], by["gpu_temp_c"]
    assert clock.loc["sm_clock_mhz", "value"] == 345.0
    assert set(clock["role"]) == {"this entity", "peers", "threshold"}
    assert clock.loc["peers_median_sm_clock_mhz", "value"] > clock.loc["sm_clock_mhz", "value"]
    assert temp.loc["gpu_temp_c", "value"] > temp.loc["threshold_gpu_temp_c", "value"]
    assert clock["unit"].iloc[0] == "MHz" and temp["unit"].iloc[0] == "°C"


def test_a_two_bar_comparison_is_drawn_tall_enough_with_its_values_written() -> None:
    """The demo's throttle panel was 76 px for title, axis, legend and bars: the bars drew as
    one line, their labels on top of each other. Each bar now has room and carries its value."""
    ev = {"sm_clock_mhz": 345.0, "model_busy_median_mhz": 1980.0}
    (only,) = panels(ev)
    spec = panel(*only).to_dict()
    # Streamlit fits title, axis and legend into this height too: ~170 px of them, then bars.
    assert spec["height"] >= 3 * 30 + 170
    marks = [layer["mark"]["type"] for layer in spec["layer"]]
    assert marks == ["bar", "text"]
