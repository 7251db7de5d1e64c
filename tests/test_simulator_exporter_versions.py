"""The simulated dcgm-exporter writes the XID series as real exporters do, version by version
(layouts read from dcgm-exporter's source: gpu_collector.go, expcollector.go, xid_errors.go)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from observer.fleet.catalog import XID_COUNT_METRIC
from simulator.engine import FleetSimulator
from simulator.exposition import dcgm_text
from simulator.openmetrics import OpenMetricsWriter
from simulator.scenario import Scenario, scenario_from_dict

MIN = 60.0
NODE = "h100-0000"
GAUGE = "DCGM_FI_DEV_XID_ERRORS"


def _scenario(exporter: dict[str, Any], **extra: Any) -> Scenario:
    return scenario_from_dict(
        {
            "name": "xid-layouts",
            "duration": 3600,
            "pools": [{"name": "h100", "model": "H100", "nodes": 1, "gpus_per_node": 2}],
            "faults": [{"kind": "xid48_dbe", "node": NODE, "gpu": 1, "start": "10m", "end": "20m"}],
            "exporter": exporter,
            **extra,
        }
    )


def _series(sim: FleetSimulator, t: float) -> dict[str, list[tuple[dict[str, str], float]]]:
    """family -> [(labels, value)] of the node's page, parsed by prometheus_client."""
    text = dcgm_text(sim.sample(t), sim.layout, NODE, exporter=sim.scenario.exporter)
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(fam.name, []).append((dict(s.labels), s.value))
    return out


def _gpu(rows: list[tuple[dict[str, str], float]], gpu: str) -> list[tuple[dict[str, str], float]]:
    return [(lab, v) for lab, v in rows if lab["gpu"] == gpu]


def test_4x_gauge_is_sticky_shows_the_cascade_follower_and_carries_err_labels() -> None:
    sim = FleetSimulator(_scenario({"version": "4.x"}))
    t0 = sim.scenario.start
    before = _gpu(_series(sim, t0 + 9 * MIN)[GAUGE], "1")
    assert before == [({**before[0][0], "err_code": "0", "err_msg": "No Error"}, 0.0)]
    during = _gpu(_series(sim, t0 + 11 * MIN)[GAUGE], "1")[0]
    # XID 48 is followed by 45 within milliseconds: the gauge shows the follower
    assert during[1] == 45.0 and during[0]["err_code"] == "45"
    assert during[0]["err_msg"].startswith("Preemptive cleanup")
    # the fault ended (a reset at 20 min): the gauge still holds the last XID
    after = _gpu(_series(sim, t0 + 40 * MIN)[GAUGE], "1")[0]
    assert after[1] == 45.0
    # a restart of the exporter (the node rebooted) starts it empty
    sim.exporter_restarted(NODE, t0 + 45 * MIN)
    assert _gpu(_series(sim, t0 + 46 * MIN)[GAUGE], "1")[0][1] == 0.0


def test_4x_count_has_one_series_per_code_a_zero_series_and_a_random_order() -> None:
    sim = FleetSimulator(_scenario({"version": "4.x"}))
    t0 = sim.scenario.start
    rows = _series(sim, t0 + 11 * MIN)[XID_COUNT_METRIC]
    healthy = _gpu(rows, "0")
    assert len(healthy) == 1 and "xid" not in healthy[0][0] and healthy[0][1] == 0.0
    assert healthy[0][0]["window_size_in_ms"] == "300000"
    faulty = _gpu(rows, "1")
    assert sorted((lab["xid"], v) for lab, v in faulty) == [("45", 1.0), ("48", 1.0)]
    assert all(lab["window_size_in_ms"] == "300000" for lab, _ in faulty)
    pages = [_series(sim, t0 + 10 * MIN + k * 30)[XID_COUNT_METRIC] for k in range(1, 10)]
    orders = {tuple(lab["xid"] for lab, _ in _gpu(rows, "1")) for rows in pages}
    assert orders == {("48", "45"), ("45", "48")}  # a Go map: the order changes per scrape
    # the window has passed: the count is a zero series again, the gauge still says 45
    later = _series(sim, t0 + 16 * MIN)
    assert [(("xid" in lab), v) for lab, v in _gpu(later[XID_COUNT_METRIC], "1")] == [(False, 0.0)]


def test_33_has_no_err_labels_and_types_the_count_gauge_4x_counter() -> None:
    sim33 = FleetSimulator(_scenario({"version": "3.3"}))
    t = sim33.scenario.start + 11 * MIN
    page33 = dcgm_text(sim33.sample(t), sim33.layout, NODE, exporter=sim33.scenario.exporter)
    assert "err_code" not in page33
    assert f"# TYPE {XID_COUNT_METRIC} gauge\n" in page33
    sim4 = FleetSimulator(_scenario({"version": "4.x"}))
    page4 = dcgm_text(sim4.sample(t), sim4.layout, NODE, exporter=sim4.scenario.exporter)
    assert f"# TYPE {XID_COUNT_METRIC} counter\n" in page4
    off = FleetSimulator(_scenario({"version": "4.x", "xid_count": False}))
    assert XID_COUNT_METRIC not in dcgm_text(
        off.sample(t), off.layout, NODE, exporter=off.scenario.exporter
    )


def test_an_exporter_down_restarts_the_exporter_and_empties_the_gauge() -> None:
    down = [{"kind": "exporter_down", "node": NODE, "start": "30m", "end": "32m"}]
    sim = FleetSimulator(_scenario({"version": "4.x"}, confounders=down))
    t0 = sim.scenario.start
    assert _gpu(_series(sim, t0 + 29 * MIN)[GAUGE], "1")[0][1] == 45.0
    assert _gpu(_series(sim, t0 + 33 * MIN)[GAUGE], "1")[0][1] == 0.0


def test_simple_layout_stays_as_it_was_for_the_tests_that_ask_for_it() -> None:
    """The convenient layout: the fault's own code, cleared when the fault ends, no cascade."""
    sim = FleetSimulator(_scenario({"version": "simple"}))
    t0 = sim.scenario.start
    during = _series(sim, t0 + 11 * MIN)
    assert _gpu(during[GAUGE], "1")[0] == (_gpu(during[GAUGE], "1")[0][0], 48.0)
    assert "err_code" not in _gpu(during[GAUGE], "1")[0][0]
    assert [(lab["xid"], v) for lab, v in during[XID_COUNT_METRIC]] == [("48", 1.0)]
    assert _gpu(_series(sim, t0 + 21 * MIN)[GAUGE], "1")[0][1] == 0.0


def test_backfill_writes_the_same_xid_series(tmp_path: Path) -> None:
    sim = FleetSimulator(_scenario({"version": "4.x"}))
    t0 = sim.scenario.start
    om = tmp_path / "m.om"
    OpenMetricsWriter(sim).write(om, t0 + 10 * MIN, t0 + 11 * MIN)
    text = om.read_text()
    assert 'err_code="45",err_msg="Preemptive cleanup' in text
    count = [x for x in text.splitlines() if x.startswith(XID_COUNT_METRIC + "{")]
    # steps at 10, 10.5 and 11 min; the follower comes 50 ms after the 48 of 10:00
    assert sum('xid="48"' in x for x in count) == 3 and sum('xid="45"' in x for x in count) == 2
    assert sum("xid=" not in x and x.split()[-2] == "0" for x in count) == 3  # GPU 0, 3 steps


def test_scenarios_and_the_suite_default_to_the_4x_layout() -> None:
    """The suite, the held-out fleets and the demo run on what real exporters write; `simple`
    only where a scenario names it."""
    assert _scenario({}).exporter.version == "4.x"
    suite = Path(__file__).parents[1] / "lab" / "suite"
    assert all("version: simple" not in p.read_text() for p in suite.glob("*.yaml"))
