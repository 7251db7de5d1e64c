"""Usage numbers reconcile with PromQL over the same window, on a real Prometheus (issue 14).

The simulator's small scenario is backfilled into the Debian Prometheus; the Prometheus
collector takes a snapshot every 30 s over ten minutes and metering records each. For every
namespace, allocated-and-measured GPU-hours must equal `count_over_time` of the utilization
series and busy GPU-hours `sum_over_time(...) / 100`, both over the subquery `[599s:30s]` (the
same 20 steps in Prometheus 2 and 3: (end - 600 s, end]), times 30 s. The window includes the GPU
that fell off the bus (XID 79, no samples and so no pod either) and a straggler.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from metering import Meter, usage
from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.plan import PromSettings
from remediations.store import Store
from tests.prometheus_fixture import PrometheusHandle, start_prometheus, write_scenario
from tests.simulator_cases import MIN, small

pytestmark = [pytest.mark.prometheus]
STEP = 30.0
WINDOW = 600.0
ALLOC = 'sum by (namespace) (count_over_time(DCGM_FI_DEV_GPU_UTIL{namespace!=""}[599s:30s]))'
BUSY = 'sum by (namespace) (sum_over_time(DCGM_FI_DEV_GPU_UTIL{namespace!=""}[599s:30s]))'


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusHandle, float]]:
    scenario = small()
    tmp = tmp_path_factory.mktemp("prom-metering")
    om = write_scenario(scenario, tmp / "small.om", scenario.start, scenario.start + 22 * MIN)
    handle = start_prometheus(om, tmp)
    yield handle, scenario.start
    handle.stop()


def _by_namespace(handle: PrometheusHandle, query: str, at: float) -> dict[str, float]:
    data = handle.api("query", query=query, time=at)
    return {r["metric"]["namespace"]: float(r["value"][1]) for r in data["result"]}


def test_usage_reconciles_with_promql(prom: tuple[PrometheusHandle, float], tmp_path: Path) -> None:
    handle, start = prom
    w0 = float(math.ceil((start + 9 * MIN) / 300) * 300)  # a bucket boundary, in the XID 79
    w1 = w0 + WINDOW
    store = Store.open(f"sqlite:///{tmp_path / 'metering.db'}", cluster="test")
    meter = Meter(store)
    with PrometheusCollector(PromSettings(handle.url)) as collector:
        t = w0
        while t <= w1:
            snap = collector.collect(t).snapshot
            meter.record_cycle(snap, t)
            t += STEP
    rows = usage(store, w0, w1, by="namespace")
    store.close()
    alloc = _by_namespace(handle, ALLOC, w1)
    busy = _by_namespace(handle, BUSY, w1)
    assert set(alloc) == {"default", "research", "serving"}
    ours: dict[str, list[float]] = {}
    for r in rows:
        acc = ours.setdefault(r.key, [0.0, 0.0, 0.0])
        acc[0] += r.allocated_gpu_hours
        acc[1] += r.unmeasured_gpu_hours
        acc[2] += r.busy_gpu_hours
    assert set(ours) == set(alloc)
    for ns, (allocated, unmeasured, busy_h) in ours.items():
        assert allocated - unmeasured == pytest.approx(alloc[ns] * STEP / 3600, rel=1e-9), ns
        assert busy_h == pytest.approx(busy[ns] * STEP / 100 / 3600, rel=1e-9), ns
    assert all(0 < b < a for a, _, b in ours.values())  # partly busy: the numbers mean something
