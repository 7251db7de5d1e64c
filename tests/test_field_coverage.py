"""Field coverage with dcgm-exporter's shipped field list, through a real Prometheus (issue 11).

The shipped counters file leaves the ECC, retired-page and NVLink error counters and the
throttle reasons off. The coverage report must say which detectors then run on reduced evidence
and print the CSV lines that turn the fields on; the detectors that can infer from what is
present (an XID 48 double-bit error through the XID gauge) keep working.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from detectors.suite import DetectorSuite
from evaluation.replay import replay
from observer.fleet.coverage import EXPORTER_CSV_LINES, field_coverage, snapshot_coverage
from observer.prometheus import PrometheusCollector, PromSettings
from simulator.engine import FleetSimulator
from simulator.openmetrics import OpenMetricsWriter
from simulator.scenario import demo_scenario
from tests.prometheus_fixture import PrometheusFactory

MIN = 60.0
DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"


def test_coverage_names_reduced_detectors_and_the_lines_to_add() -> None:
    full = field_coverage([*EXPORTER_CSV_LINES, "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL",
                           "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
                           "DCGM_FI_DEV_POWER_USAGE"])  # fmt: skip
    assert {d.status for d in full.detectors} == {"full"} and full.exporter_lines == ()
    blind = field_coverage([])
    assert {d.detector for d in blind.detectors if d.status == "blind"} >= {"gpu_lost", "gpu_idle"}
    assert any("CANNOT RUN" in line for line in blind.lines())
    # the reasons field under its newer name counts as present
    renamed = field_coverage(["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"])
    assert "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" not in renamed.missing


@pytest.mark.prometheus
def test_shipped_field_list_through_prometheus(
    prometheus_factory: PrometheusFactory, tmp_path: Path
) -> None:
    sc = demo_scenario()
    t0, t1 = sc.start + 15 * MIN, sc.start + 30 * MIN
    om = tmp_path / "demo-shipped.om"
    OpenMetricsWriter(FleetSimulator(sc), shipped_fields_only=True).write(om, t0 - 10 * MIN, t1)
    prom = prometheus_factory(om)
    with PrometheusCollector(PromSettings(prom.url)) as collector:
        snaps = [r.snapshot for r in collector.collect_range(t0, t1, sc.scrape_interval)]
    cov = snapshot_coverage(snaps[-1])
    status = {d.detector: d.status for d in cov.detectors}
    assert status["gpu_memory"] == "reduced" and status["gpu_throttle"] == "reduced"
    assert status["gpu_interconnect"] == "reduced" and status["gpu_xid"] == "full"
    assert DBE in cov.missing and EXPORTER_CSV_LINES[DBE] in cov.exporter_lines
    report = "\n".join(cov.lines())
    assert "gpu_throttle: reduced evidence (SM clock" in report
    result = replay(DetectorSuite.default(), ((s.taken_at, s) for s in snaps))
    found = {(f.kind.value, f.node) for f in result.episodes}
    assert ("gpu_xid", "h100-0005") in found, found  # the DBE at 20 m, through XID 48
