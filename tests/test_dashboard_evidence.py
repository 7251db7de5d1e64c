"""Incident evidence as a person reads it: one panel per metric, each in its own units, with
this GPU against the peers the detector compared it with and its threshold."""

from __future__ import annotations

from dashboards.views.evidence import panels, stem

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
