"""A range replay (raw samples, every step evaluated locally) equals instant cycles, step by step.

The guarantee behind `gpufleet backtest`/`eval`: observer.prometheus.replay.range_replay derives
each step's answers
from raw samples instead of asking Prometheus at each step, so this test replays a backfilled
real Prometheus both ways — `collect_range` in short chunks (chunk edges inside the window) and
`collect(at=t)` in time order, as the live loop does — and compares every snapshot: GPU rows,
values and their NaN pattern, sample times, counter increases, nodes, pods, jobs, steps and
telemetry health. The window holds a vanished GPU (XID 79, judged by sample age), an exporter
outage, a pod replacing unallocated series (old series linger: no staleness markers) and
counter resets written into the data (a GPU counter and a pod's training steps), with
Prometheus' default lookback and with `--query.lookback-delta=1m` (read from the server).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from observer.fleet.model import FleetSnapshot
from observer.prometheus.collector import CollectResult, PrometheusCollector
from observer.prometheus.plan import PromSettings
from simulator.scenario import Scenario
from tests.prometheus_fixture import PrometheusHandle, start_prometheus, write_scenario
from tests.simulator_cases import MIN, small

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]
STEP = 30.0
RESET_AT = 9 * MIN + 15
"""Counters written from here on restart near zero (an exporter or pod restart)."""
RESET_COUNTER = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
RESET_GPU = ('Hostname="h100-0000"', 'gpu="0"')
RESET_POD = 'pod="train-worker-0"'
_SAMPLE = re.compile(r"^(\S+\{.*\}) (\S+) (\S+)$")


def with_resets(path: Path, start: float) -> Path:
    """The OpenMetrics file with one GPU counter and one pod's steps restarting at RESET_AT."""
    lines = path.read_text().splitlines()
    base: dict[str, float] = {}
    out: list[str] = []
    for line in lines:
        m = _SAMPLE.match(line)
        hit = m is not None and (
            (line.startswith(RESET_COUNTER + "{") and all(x in line for x in RESET_GPU))
            or (line.startswith("training_steps_total{") and RESET_POD in line)
        )
        if m is None or not hit or float(m.group(3)) < start + RESET_AT:
            out.append(line)
            continue
        series, value = m.group(1), float(m.group(2))
        first = base.setdefault(series, value - 7.0)
        out.append(f"{series} {value - first:.1f} {m.group(3)}")
    path.write_text("\n".join(out) + "\n")
    return path


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return small()


@pytest.fixture(scope="module", params=[None, "1m"], ids=["lookback-5m", "lookback-1m"])
def prom(
    request: pytest.FixtureRequest, scenario: Scenario, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusHandle]:
    tmp = tmp_path_factory.mktemp("equiv")
    om = write_scenario(scenario, tmp / "small.om", scenario.start, scenario.start + 15 * MIN)
    handle = start_prometheus(with_resets(om, scenario.start), tmp, request.param)
    yield handle
    handle.stop()


def both_ways(url: str, t0: float, t1: float) -> list[tuple[CollectResult, CollectResult]]:
    settings = PromSettings(url, range_chunk=150.0)  # 6 steps per chunk: edges inside
    with PrometheusCollector(settings) as c:
        replayed = list(c.collect_range(t0, t1, STEP))
    with PrometheusCollector(settings) as c:
        instant = [c.collect(at=r.snapshot.taken_at) for r in replayed]
    return list(zip(replayed, instant, strict=True))[1:]  # the first instant cycle is cold


def assert_same(a: FleetSnapshot, b: FleetSnapshot) -> None:
    at = f"at {a.taken_at - b.taken_at:+.0f} s, t={b.taken_at:.0f}"
    assert a.taken_at == b.taken_at
    for name in ("uuid", "node_index", "device_index", "model_index", "pod_index", "job_index",
                 "mig_instance", "mig_profile", "pci_bus_id"):  # fmt: skip
        np.testing.assert_array_equal(getattr(a.gpus, name), getattr(b.gpus, name), f"{name} {at}")
    assert a.gpus.models == b.gpus.models
    assert sorted(a.metrics) == sorted(b.metrics)
    for name, want in b.metrics.items():
        got = a.metrics[name]
        np.testing.assert_array_equal(got.value, want.value, f"{name} value {at}")
        np.testing.assert_array_equal(got.timestamp, want.timestamp, f"{name} time {at}")
        assert (got.increase is None) == (want.increase is None), f"{name} increase {at}"
        if want.increase is not None:
            assert got.increase is not None
            np.testing.assert_allclose(got.increase, want.increase, rtol=1e-9, atol=1e-9,
                                       err_msg=f"{name} increase {at}")  # fmt: skip
            assert got.window_seconds == want.window_seconds
    assert a.nodes == b.nodes and a.pods == b.pods and a.jobs == b.jobs, at
    assert a.job_steps == b.job_steps, at
    assert a.job_steps_increase.keys() == b.job_steps_increase.keys(), at
    for job, inc in b.job_steps_increase.items():
        assert a.job_steps_increase[job] == pytest.approx(inc, rel=1e-9, nan_ok=True), at
    ta, tb = a.telemetry, b.telemetry
    assert ta is not None and tb is not None
    np.testing.assert_array_equal(ta.node_last_sample, tb.node_last_sample, at)
    np.testing.assert_array_equal(ta.node_up, tb.node_up, at)
    assert (ta.scrape_interval, ta.source_ok, ta.degraded_reason) == (
        tb.scrape_interval, tb.source_ok, tb.degraded_reason)  # fmt: skip


def test_replay_equals_instant_cycles(prom: PrometheusHandle, scenario: Scenario) -> None:
    pairs = both_ways(prom.url, scenario.start + 2 * MIN, scenario.start + 15 * MIN)
    assert len(pairs) == 26
    for replayed, instant in pairs:
        assert_same(replayed.snapshot, instant.snapshot)
    snaps = [r.snapshot for r, _ in pairs]
    assert any(r.report.duplicate_identity_rows for _, r in pairs), "no lingering old pod series"
    lost = [s for s in snaps if np.isnan(s.metrics["DCGM_FI_DEV_FB_USED"].timestamp).any()]
    assert lost, "the XID 79 GPU is never a row without samples"
    withdrawn = {max(n.gpus_withdrawn or 0 for n in s.nodes) for s in snaps}
    assert withdrawn == {0, 3}, "the device plugin's withdrawals (XIDs at 5 min) never show"
    down = [s for s in snaps if s.telemetry is not None and not s.telemetry.node_up.all()]
    assert down, "the exporter outage never shows"
    reset = [s for s in snaps if 0 <= s.taken_at - scenario.start - RESET_AT < 2 * MIN]
    node = next(i for i, n in enumerate(reset[0].nodes) if n.name == "h100-0000")
    gpu = np.flatnonzero((reset[0].gpus.node_index == node) & (reset[0].gpus.device_index == 0))
    inc = [s.metrics[RESET_COUNTER].increase for s in reset]
    assert all(i is not None and np.isfinite(i[gpu]).all() and (i[gpu] > 0).all() for i in inc)
