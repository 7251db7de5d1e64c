"""A range replay whose raw-sample reads fail: degraded steps with the reason, or no replay.

Through a proxy in front of a real Prometheus (tests.http_proxy): a failing XID-count read
marks the chunk's snapshots degraded and leaves the XID column empty while the rest of each
snapshot is there; a failing read of the inventory's group (the GPUs themselves) is a
GpufleetError, as in an instant cycle.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from errors import GpufleetError
from observer.fleet.catalog import XID_COUNT_METRIC
from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.plan import PromSettings
from simulator.scenario import Scenario
from tests.http_proxy import FaultyProxy
from tests.prometheus_fixture import PrometheusHandle, start_prometheus, write_scenario
from tests.simulator_cases import MIN, small

pytestmark = [pytest.mark.prometheus]


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return small()


@pytest.fixture(scope="module")
def prom(
    scenario: Scenario, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusHandle]:
    tmp = tmp_path_factory.mktemp("fail")
    om = write_scenario(scenario, tmp / "small.om", scenario.start, scenario.start + 8 * MIN)
    handle = start_prometheus(om, tmp)
    yield handle
    handle.stop()


def test_failed_reads_degrade_or_stop_the_replay(
    prom: PrometheusHandle, scenario: Scenario
) -> None:
    t0, t1 = scenario.start + 3 * MIN, scenario.start + 6 * MIN
    with FaultyProxy(prom.url) as proxy:
        failing = proxy.rule(rf"query={XID_COUNT_METRIC}\[", status=503)
        settings = PromSettings(proxy.url, retries=1, backoff=0.01, range_chunk=60.0)
        with PrometheusCollector(settings) as c:
            results = list(c.collect_range(t0, t1, 30.0))
        assert failing.hits >= 2 and len(results) == 7
        for r in results:
            s = r.snapshot
            assert s.telemetry is not None and not s.telemetry.source_ok
            assert "query raw:xid failed: HTTP 503" in s.telemetry.degraded_reason
            assert XID_COUNT_METRIC not in s.metrics  # as an instant cycle without its answer
            assert len(s.gpus) == 40
            assert np.isfinite(s.metrics["DCGM_FI_DEV_GPU_UTIL"].value).sum() >= 30
        proxy.rules.clear()
        proxy.rule(r"query=\{__name__=~\"[^\"]*DCGM_FI_DEV_FB_USED", status=400)
        with PrometheusCollector(settings) as c, pytest.raises(GpufleetError) as err:
            list(c.collect_range(t0, t1, 30.0))
        assert "HTTP 400" in str(err.value) and not err.value.temporary


def test_a_window_that_starts_before_the_data_replays(
    prom: PrometheusHandle, scenario: Scenario
) -> None:
    """What-if's default window (the last hour) on a Prometheus younger than an hour: the steps
    before the first sample are empty snapshots, not a crash ("cannot reshape array of size 0")."""
    t0, t1 = scenario.start - 10 * MIN, scenario.start + 4 * MIN
    with PrometheusCollector(PromSettings(prom.url, range_chunk=120.0)) as c:
        results = list(c.collect_range(t0, t1, 30.0))
    assert len(results) == 29
    before = [r.snapshot for r in results if r.snapshot.taken_at < scenario.start - 5 * MIN]
    after = [r.snapshot for r in results if r.snapshot.taken_at >= scenario.start + MIN]
    assert before and all(len(s.gpus) == 0 for s in before)
    assert after and all(len(s.gpus) == 40 for s in after)
