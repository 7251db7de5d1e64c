"""The Prometheus collector against a real VictoriaMetrics: the same findings as Prometheus.

One scenario window is written once, loaded into a real Prometheus (promtool backfill) and a
real VictoriaMetrics (import API); instant cycles (what `gpufleet collect` and `detect` run)
and a range replay (what `backtest` runs) must give the same GPUs, pods and findings from both.
VictoriaMetrics has no `/api/v1/status/flags` (the replay falls back to a 5 min lookback), its
range windows are left-open like Prometheus 3, and its `increase()` does not extrapolate (only
a cold start asks for it); none of this changes a finding here (docs/collectors.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from backtesting.replayer import replay
from detectors.suite import DetectorSuite
from observer.fleet.model import FleetSnapshot
from observer.prometheus import PrometheusCollector, PromSettings
from simulator.engine import FleetSimulator
from simulator.openmetrics import OpenMetricsWriter
from simulator.scenario import demo_scenario
from tests.prometheus_fixture import PrometheusFactory
from tests.victoria_metrics_fixture import VictoriaFactory

MIN = 60.0
Entities = set[tuple[str, str | None, str | None, str | None, str]]


def _run(url: str, t0: float, t1: float, step: float) -> tuple[FleetSnapshot, Entities]:
    with PrometheusCollector(PromSettings(url)) as collector:
        instant = collector.collect(t1).snapshot
        snaps = [r.snapshot for r in collector.collect_range(t0, t1, step)]
    assert all(s.telemetry is not None and s.telemetry.source_ok for s in snaps)
    result = replay(DetectorSuite.default(), ((s.taken_at, s) for s in snaps))
    assert result.failures == ()
    return instant, {
        (f.kind.value, f.node, f.gpu_uuid, f.job, f.severity.value) for f in result.episodes
    }


@pytest.mark.prometheus
@pytest.mark.slow
def test_victoria_metrics_gives_the_findings_prometheus_gives(
    prometheus_factory: PrometheusFactory, victoria_factory: VictoriaFactory, tmp_path: Path
) -> None:
    sc = demo_scenario()
    t0, t1 = sc.start + 30 * MIN, sc.start + 90 * MIN
    om = tmp_path / "demo.om"
    OpenMetricsWriter(FleetSimulator(sc)).write(om, t0 - 10 * MIN, t1)
    vm = victoria_factory(om)
    prom = prometheus_factory(om)
    vm_snap, vm_found = _run(vm.url, t0, t1, sc.scrape_interval)
    prom_snap, prom_found = _run(prom.url, t0, t1, sc.scrape_interval)
    assert list(vm_snap.gpus.uuid) == list(prom_snap.gpus.uuid)
    assert [p.name for p in vm_snap.pods] == [p.name for p in prom_snap.pods]
    assert np.array_equal(vm_snap.gpus.pod_index, prom_snap.gpus.pod_index)
    kinds = {k for k, *_ in prom_found}
    assert {"straggler", "nccl_hang", "gpu_throttle"} <= kinds, kinds
    assert vm_found == prom_found
