"""simulator/snapshot.py: PromQL increase() semantics and lookback staleness."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.engine import FleetSimulator
from simulator.scenario import scenario_from_dict
from simulator.snapshot import SimSnapshots, increase


def test_increase_is_reset_aware_and_extrapolated_like_promql() -> None:
    times = np.array([0.0, 30.0, 60.0, 90.0])
    values = np.array([[0.0], [10.0], [20.0], [5.0]])  # reset before the last sample
    # 25 counted; sampled 90 s; the counter started at 0 so no extrapolation before the first
    # sample; 10 s to the window end (< 1.1 x 30 s) is extrapolated: 25 * 100 / 90.
    assert increase(times, values, 100.0, 120.0)[0] == pytest.approx(25 * 100 / 90)
    steady = np.array([[100.0], [130.0], [160.0], [190.0]])
    # Window (-20, 100]: 20 s before the first sample and 10 s after the last are extrapolated.
    assert increase(times, steady, 100.0, 120.0)[0] == pytest.approx(90 * 120 / 90)
    one = np.array([[1.0], [np.nan], [np.nan], [np.nan]])
    assert np.isnan(increase(times, one, 100.0, 120.0)[0])
    assert increase(times, values, 100.0, 120.0).min() >= 0


def _scenario(**extra: object) -> FleetSimulator:
    data = {
        "name": "t",
        "duration": "30m",
        "pools": [{"name": "h100", "model": "H100", "nodes": 2}],
        "workloads": [{"name": "j", "kind": "training", "namespace": "ml", "replicas": 2}],
        **extra,
    }
    return FleetSimulator(scenario_from_dict(data))


def test_a_vanished_gpu_answers_with_its_old_sample_until_the_lookback_passes() -> None:
    sim = _scenario(
        faults=[{"kind": "xid79_fallen_off_bus", "node": "h100-0001", "gpu": 3, "start": "10m"}]
    )
    snaps = SimSnapshots(sim, lookback=300.0)
    start = sim.scenario.start
    lost = str(sim.layout.gpu_uuid[sim.layout.gpu_position("h100-0001", 3)])
    snap = snaps.snapshot(start + 12 * 60)
    row = snap.gpus.position(lost)
    util = snap.metrics["DCGM_FI_DEV_GPU_UTIL"]
    assert snap.taken_at - util.timestamp[row] >= 120.0  # stale, still answered
    later = snaps.snapshot(start + 16 * 60)
    with pytest.raises(KeyError):
        later.gpus.position(lost)
    assert len(later.gpus) == 15 and len(later.jobs) == 1


def test_counters_carry_increase_and_window() -> None:
    sim = _scenario()
    snap = SimSnapshots(sim, window=120.0).snapshot(sim.scenario.start + 600)
    col = snap.metrics["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"]
    assert col.window_seconds == 120.0 and col.increase is not None
    assert np.all(col.increase[~np.isnan(col.increase)] >= 0)
    assert snap.telemetry is not None and snap.telemetry.scrape_interval == 30.0
    nvlink = snap.metrics["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"]  # MiB/s: a rate, no increase
    assert nvlink.increase is None and nvlink.window_seconds == 0.0
