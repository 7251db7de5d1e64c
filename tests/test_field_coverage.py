"""Field coverage with dcgm-exporter's shipped field list, through a real Prometheus (issue 11).

The shipped counters file leaves the ECC, retired-page and NVLink error counters and the
throttle reasons off. The coverage report must say which detectors then run on reduced evidence
and print the CSV lines that turn the fields on; the detectors that can infer from what is
present (an XID 48 double-bit error through the XID gauge) keep working.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from backtesting.replayer import replay
from detectors.coverage import Evidence
from detectors.suite import DetectorSuite
from gpufleet.coverage_report import coverage_report
from observer.fleet.catalog import METRICS, XID_COUNT_METRIC
from observer.fleet.field_presence import (
    CATALOG_FIELDS,
    SHIPPED_DEFAULT_FIELDS,
    exporter_line,
    field_presence,
    snapshot_fields,
)
from observer.prometheus import PrometheusCollector, PromSettings
from simulator.engine import FleetSimulator
from simulator.openmetrics import OpenMetricsWriter
from simulator.scenario import demo_scenario
from tests.prometheus_fixture import PrometheusFactory

MIN = 60.0
DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
THROTTLE = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
RETIRED = "DCGM_FI_DEV_RETIRED_DBE"


def test_presence_lists_missing_fields_and_the_lines_to_add() -> None:
    full = field_presence(CATALOG_FIELDS)
    assert full.missing == () and full.exporter_lines == ()
    shipped = field_presence(SHIPPED_DEFAULT_FIELDS)
    assert set(shipped.missing) == {m.name for m in METRICS if not m.default_on}
    assert (
        f"{DBE}, counter, Total number of double-bit volatile ECC errors." in shipped.exporter_lines
    )
    assert "add to dcgm-exporter's counters CSV" in "\n".join(shipped.lines())
    # the reasons field under its newer name counts as present; fields off the catalog get lines
    renamed = field_presence(["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"], [THROTTLE, RETIRED])
    assert renamed.present == (THROTTLE,) and renamed.missing == (RETIRED,)
    assert renamed.exporter_lines[0].startswith(f"{RETIRED}, counter, Total number of retired")
    assert exporter_line(XID_COUNT_METRIC).startswith(f"{XID_COUNT_METRIC}, gauge, ")


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
    cov = coverage_report(snapshot_fields(snaps[-1]))
    status = {d.detector: d.evidence for d in cov.detectors}
    reduced = {"gpu_memory", "gpu_throttle", "gpu_interconnect"}
    assert {n for n, e in status.items() if e is Evidence.REDUCED} >= reduced, status
    assert Evidence.CANNOT_RUN not in status.values(), status
    assert DBE in cov.fields.missing and exporter_line(DBE) in cov.fields.exporter_lines
    report = "\n".join(cov.lines())
    assert "gpu_throttle: reduced evidence (no clock-event reasons" in report
    assert "infers from DCGM_FI_DEV_SM_CLOCK" in report
    result = replay(DetectorSuite.default(), ((s.taken_at, s) for s in snaps))
    found = {(f.kind.value, f.node) for f in result.episodes}
    assert ("gpu_xid", "h100-0005") in found, found  # the DBE at 20 m, through XID 48
