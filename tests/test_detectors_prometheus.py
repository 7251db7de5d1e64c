"""End to end through a real Prometheus: simulate, backfill, collect range, replay, score.

The same path `gpufleet backtest`/`eval` will take (observer.prometheus.collector.collect_range ->
backtesting.replayer -> lab.scoring), on the demo scenario, with Prometheus' default lookback
and with `--query.lookback-delta=1m` (vanished series must be judged by sample age either way).
"""

from __future__ import annotations

import pytest

from backtesting.replayer import replay
from detectors.suite import DetectorSuite
from lab.scoring import score
from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.plan import PromSettings
from simulator.engine import FleetSimulator
from simulator.scenario import demo_scenario
from simulator.truth import ground_truth
from tests.prometheus_fixture import PrometheusFactory


@pytest.mark.prometheus
@pytest.mark.slow
@pytest.mark.parametrize("lookback", [None, "1m"])
def test_demo_backtest_through_prometheus_meets_targets(
    prometheus_factory: PrometheusFactory, lookback: str | None
) -> None:
    sc = demo_scenario()
    prom = prometheus_factory(sc, lookback_delta=lookback)
    step = sc.scrape_interval
    with PrometheusCollector(PromSettings(prom.url)) as collector:
        frames = (
            (r.snapshot.taken_at, r.snapshot)
            for r in collector.collect_range(sc.start + step, sc.end, step)
        )
        result = replay(DetectorSuite.default(), frames)
    assert result.failures == ()
    s = score(result.episodes, ground_truth(sc, FleetSimulator(sc).layout))
    assert s.missed == () and s.precision == 1.0 and s.fp_by_confounder == {}, s.table()
    assert max(s.per_fault_kind["xid79_fallen_off_bus"].ttd) <= 2 * step
    assert max(s.per_fault_kind["xid48_dbe"].ttd) <= 2 * step
    assert max(s.per_fault_kind["nccl_hang"].ttd) <= 120.0
    assert max(s.per_fault_kind["straggler"].ttd) <= 300.0
