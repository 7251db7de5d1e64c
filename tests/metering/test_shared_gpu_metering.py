"""Metering on time-sliced GPUs: a shared GPU's hours are split among the pods sharing it, each
share charged to that pod's namespace and job, instead of the whole GPU to one arbitrary pod
(issue 27, finding 5). Through the simulator's backfill into a real Prometheus."""

from __future__ import annotations

from pathlib import Path

import pytest

from metering import Meter, usage
from metering.queries import Dimension
from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.plan import PromSettings
from remediations.store import Store
from tests.prometheus_fixture import start_prometheus, write_scenario
from tests.test_shared_gpus import shared_scenario

pytestmark = [pytest.mark.prometheus]
MIN = 60.0
STEP = 30.0


Hours = dict[str, tuple[float, float, float]]


def _hours(store: Store, w0: float, w1: float, by: Dimension) -> Hours:
    """key -> (GPU-hours, allocated GPU-hours, busy GPU-hours) summed over models."""
    out: Hours = {}
    for r in usage(store, w0, w1, by=by):
        g, a, b = out.get(r.key, (0.0, 0.0, 0.0))
        out[r.key] = (g + r.gpu_hours, a + r.allocated_gpu_hours, b + r.busy_gpu_hours)
    return out


def test_a_shared_gpus_hours_are_split_among_its_pods(tmp_path: Path) -> None:
    sc = shared_scenario(namespaces="ml web ml ml")  # a (ml) and b (web) share GPU 0
    om = write_scenario(sc, tmp_path / "ts.om", sc.start, sc.start + 12 * MIN)
    prom = start_prometheus(om, tmp_path)
    w0 = float((int(sc.start + 5 * MIN) // 300 + 1) * 300)  # a bucket boundary
    w1 = w0 + 5 * MIN
    store = Store.open(f"sqlite:///{tmp_path / 'metering.db'}", cluster="test")
    try:
        meter = Meter(store)
        with PrometheusCollector(PromSettings(prom.url)) as collector:
            t = w0
            while t <= w1:
                meter.record_cycle(collector.collect(t).snapshot, t)
                t += STEP
        fleet = _hours(store, w0, w1, "fleet")[""]
        jobs = _hours(store, w0, w1, "job")
        namespaces = _hours(store, w0, w1, "namespace")
    finally:
        store.close()
        prom.stop()
    window_h = (w1 - w0) / 3600
    assert fleet[0] == pytest.approx(2 * window_h)  # two GPUs, counted once each
    assert fleet[1] == pytest.approx(2 * window_h)  # both held all along
    # every job is charged half a GPU (old reading: two jobs a whole GPU, two nothing)
    assert sorted(jobs) == ["ml/a", "ml/c", "ml/d", "web/b"]
    for key, (gpu_h, alloc_h, _) in jobs.items():
        assert [gpu_h, alloc_h] == pytest.approx([window_h / 2] * 2), key
    assert {k: v[1] for k, v in namespaces.items()} == {
        "ml": pytest.approx(1.5 * window_h),
        "web": pytest.approx(0.5 * window_h),
    }
    # busy time is split the same way: the pods' shares add up to the fleet's, none is lost
    assert sum(b for _, _, b in jobs.values()) == pytest.approx(fleet[2])
    assert sum(b for _, _, b in namespaces.values()) == pytest.approx(fleet[2])
    assert fleet[2] > 0
