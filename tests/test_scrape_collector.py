"""The direct-scrape collector against the simulator's live exporters (and a tiny broken one);
and the agreement test: Prometheus and direct scrape give the same snapshot of one scenario."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from errors import GpufleetError
from observer.fleet.model import FleetSnapshot
from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.plan import PromSettings
from observer.scrape.collector import ScrapeCollector, ScrapeSettings
from observer.scrape.ring_window import RingWindow
from simulator.clock import ManualWall
from simulator.cluster import ClusterOptions
from simulator.serve import SimulationHandle, start_simulation
from tests.prometheus_fixture import start_prometheus, write_scenario
from tests.simulator_cases import MIN, small

GAUGES_EXACT = (
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_EXP_XID_ERRORS_COUNT",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
)  # fmt: skip


@pytest.fixture
def live() -> Iterator[tuple[SimulationHandle, ManualWall]]:
    sc = small()
    wall = ManualWall(sc.start)
    handle = start_simulation(sc, wall=wall, options=ClusterOptions(startup_seconds=0))
    yield handle, wall
    handle.stop()


def scraper(handle: SimulationHandle, **kw: Any) -> ScrapeCollector:
    settings = ScrapeSettings(discovery_url=f"{handle.metrics_url}/targets", **kw)
    return ScrapeCollector(settings, now=handle.clock.scenario_time)


def run_until(c: ScrapeCollector, wall: ManualWall, handle: SimulationHandle, minute: float) -> Any:
    """Scrape every 30 scenario seconds up to `minute` (inclusive); the last result."""
    start = handle.scenario.start
    result = c.collect()
    while handle.clock.scenario_time() < start + minute * MIN:
        wall.advance(30)
        result = c.collect()
    return result


def test_prometheus_and_direct_scrape_agree(
    live: tuple[SimulationHandle, ManualWall], tmp_path: Path
) -> None:
    handle, wall = live
    sc = handle.scenario
    # 11 min: more than the 5-minute lookback after XID 48's follower 45 changed the gauge's
    # `err_code` (5 min); backfilled data has no staleness markers (docs/collectors.md)
    t = sc.start + 11 * MIN
    with scraper(handle) as c:
        direct = run_until(c, wall, handle, 11).snapshot
    om = write_scenario(sc, tmp_path / "small.om", sc.start, sc.start + 12 * MIN)
    prom = start_prometheus(om, tmp_path)
    try:
        with PrometheusCollector(PromSettings(prom.url)) as pc:
            via_prom = pc.collect(t).snapshot
    finally:
        prom.stop()
    assert direct.taken_at == via_prom.taken_at == t
    assert_same_snapshot(direct, via_prom)


def assert_same_snapshot(a: FleetSnapshot, b: FleetSnapshot) -> None:
    assert a.node_names() == b.node_names()
    assert [n.labels.get("label_gpufleet_io_pool") for n in a.nodes] == [
        n.labels.get("label_gpufleet_io_pool") for n in b.nodes
    ]
    assert a.gpus.uuid.tolist() == b.gpus.uuid.tolist()
    assert a.gpus.node_index.tolist() == b.gpus.node_index.tolist()
    assert a.gpus.models == b.gpus.models
    assert [p.key for p in a.pods] == [p.key for p in b.pods]
    assert [(p.job_index, p.rank, p.node) for p in a.pods] == [
        (p.job_index, p.rank, p.node) for p in b.pods
    ]
    assert [(j.key, j.pod_indices) for j in a.jobs] == [(j.key, j.pod_indices) for j in b.jobs]
    assert a.gpus.pod_index.tolist() == b.gpus.pod_index.tolist()
    for name in GAUGES_EXACT:
        ca, cb = a.metrics[name], b.metrics[name]
        np.testing.assert_allclose(ca.value, cb.value, rtol=1e-9, err_msg=name)
        np.testing.assert_allclose(ca.timestamp, cb.timestamp, err_msg=name)
    for name in ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"):
        ia, ib = a.metrics[name].increase, b.metrics[name].increase
        assert ia is not None and ib is not None
        np.testing.assert_allclose(ia, ib, rtol=0.02, err_msg=name)
    assert a.job_steps == b.job_steps
    assert a.job_steps_increase == pytest.approx(b.job_steps_increase, rel=0.02)
    ta, tb = a.telemetry, b.telemetry
    assert ta is not None and tb is not None
    assert ta.scrape_interval == tb.scrape_interval == 30.0
    np.testing.assert_array_equal(ta.node_up, tb.node_up)
    np.testing.assert_allclose(ta.node_last_sample, tb.node_last_sample)


def test_exporter_down_makes_only_its_node_stale(
    live: tuple[SimulationHandle, ManualWall],
) -> None:
    handle, wall = live
    with scraper(handle) as c:
        r = run_until(c, wall, handle, 6)  # a100-0001's exporter answers 503 from 5 to 8 min
    s = r.snapshot
    assert s.telemetry is not None and s.telemetry.source_ok
    names = list(s.node_names())
    down = names.index("a100-0001")
    up = s.telemetry.node_up
    assert not up[down] and up[[i for i in range(len(names)) if i != down]].all()
    age = s.telemetry.node_age(s.taken_at)
    assert age[down] == 90.0 and np.all(np.delete(age, down) == 0.0)  # last good page 4:30
    assert np.count_nonzero(s.gpus.node_index == down) == 8  # rows kept, with old samples
    assert any("a100-0001" in p and "HTTP 503" in p for p in r.stats.problems)


def test_all_targets_down_raises(live: tuple[SimulationHandle, ManualWall]) -> None:
    dead = ScrapeSettings(targets=("http://127.0.0.1:9/metrics",), timeout=0.5)
    with ScrapeCollector(dead) as c, pytest.raises(GpufleetError) as err:
        c.collect()
    assert err.value.temporary and "no scrape target answered" in str(err.value)


BROKEN = """# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",Hostname="n1",modelName="H100"} 98
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-b",Hostname="n1",modelName="H100" 97
DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-c",Hostname="n1",modelName="H100"} ninety
DCGM_FI_DEV_GPU_UTIL{gpu="3",UUID="GPU-d",Hostname="n1",modelName="H100"} 12
"""


class _Page(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = BROKEN.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_malformed_lines_skipped_counted_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    clock = iter(range(1000, 2000, 30))
    try:
        with (
            caplog.at_level(logging.WARNING, "observer.scrape.collector"),
            ScrapeCollector(ScrapeSettings(targets=(url,)), now=lambda: float(next(clock))) as c,
        ):
            results = [c.collect() for _ in range(3)]
    finally:
        server.shutdown()
        server.server_close()
    assert [r.malformed for r in results] == [2, 2, 2]
    util = results[-1].snapshot.metrics["DCGM_FI_DEV_GPU_UTIL"]
    assert sorted(util.value.tolist()) == [12.0, 98.0]
    logged = [r for r in caplog.records if "malformed" in r.getMessage()]
    assert len(logged) == 1 and "2 malformed line(s)" in logged[0].getMessage()


def test_ring_window_is_reset_aware_and_bounded() -> None:
    ring = RingWindow(capacity=5)
    values = [100, 130, 160, 10, 40, 70, 100]  # the exporter restarted after 160
    for k, v in enumerate(values):
        ring.push(["a"], float(30 * k), np.array([float(v)]))
    inc = ring.increase(["a", "b"], 180.0, 120.0)
    assert inc[0] == pytest.approx(10 + 30 + 30 + 30)  # 160 -> 10 counts the 10 after the reset
    assert np.isnan(inc[1])
    assert ring.nbytes < 64 * 5 * 16 + 64 * 16 + 1  # one block of 64 columns
    assert ring.expire(180.0 + 2000) == 1 and len(ring) == 0
