"""The metric engine: deterministic, monotone counters, each fault on its target and window."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from observer.fleet.catalog import METRICS, Kind
from observer.fleet.model import FloatArray
from simulator.engine import XID_COUNT_WINDOW, FleetSimulator, Sample
from simulator.scenario import Scenario, scenario_from_dict
from tests.simulator_cases import MIN, small

THERMAL_BITS = 0x20 | 0x40
POWER_BRAKE = 0x80
HARMFUL = 0x8 | 0x20 | 0x40 | 0x80
# GPU positions in the small fleet (nodes in pool order, 8 GPUs each).
H100_2 = 16  # h100-0002 gpu 0: the faulty GPUs are 16..22
TRAIN = np.arange(0, 16)
STRAGGLER = 8  # train rank 1 -> h100-0001 gpu 0
HANG = np.arange(24, 32)
SERVE = np.arange(32, 36)
NOTEBOOK = np.arange(36, 38)


@pytest.fixture(scope="module")
def sc() -> Scenario:
    return small()


@pytest.fixture(scope="module")
def sim(sc: Scenario) -> FleetSimulator:
    return FleetSimulator(sc)


def at(sim: FleetSimulator, minutes: float) -> Sample:
    return sim.sample(sim.scenario.start + minutes * MIN)


def m(s: Sample, name: str) -> FloatArray:
    return s.metrics[name]


MIB = float(1 << 20)


def rate(sim: FleetSimulator, name: str, a: float, b: float) -> np.ndarray:
    return (m(at(sim, b), name) - m(at(sim, a), name)) / ((b - a) * MIN)


def test_same_time_gives_same_sample_in_any_order(sc: Scenario) -> None:
    first = FleetSimulator(sc)
    times = [sc.start + x for x in (900.0, 30.0, 1800.5, 900.0, 0.0)]
    a = [first.sample(t) for t in times]
    b = [FleetSimulator(sc).sample(t) for t in reversed(times)][::-1]
    for x, y in zip(a, b, strict=True):
        for name in x.metrics:
            np.testing.assert_array_equal(x.metrics[name], y.metrics[name], err_msg=name)
        np.testing.assert_array_equal(x.pod_steps, y.pod_steps)
        np.testing.assert_array_equal(x.gpu_pod, y.gpu_pod)
    for name in a[0].metrics:
        np.testing.assert_array_equal(a[0].metrics[name], a[3].metrics[name])


def test_every_catalog_metric_is_produced(sim: FleetSimulator) -> None:
    s = at(sim, 1)
    assert set(s.metrics) == {spec.name for spec in METRICS}
    for arr in s.metrics.values():
        assert arr.shape == (40,) and arr.dtype == np.float64


def test_counters_are_monotone(sim: FleetSimulator) -> None:
    counters = [spec.name for spec in METRICS if spec.kind == Kind.COUNTER]
    times = np.arange(0, 40 * MIN, 20.0) + sim.scenario.start
    last = {n: np.full(40, -np.inf) for n in counters}
    last_steps = np.full(len(sim.layout.pods), -np.inf)
    for t in times:
        s = sim.sample(float(t))
        for n in counters:
            v = s.metrics[n]
            ok = ~np.isnan(v)
            assert (v[ok] >= last[n][ok]).all(), (n, t)
            last[n][ok] = v[ok]
        ok = ~np.isnan(s.pod_steps)
        assert (s.pod_steps[ok] >= last_steps[ok]).all()
        last_steps[ok] = s.pod_steps[ok]


def test_training_moves_together_and_steps_advance(sim: FleetSimulator) -> None:
    s = at(sim, 3)
    util = m(s, "DCGM_FI_DEV_GPU_UTIL")[TRAIN]
    assert util.min() >= 90
    assert m(s, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")[TRAIN].min() > 0.4
    assert m(s, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")[TRAIN].min() > 0.8
    steps = s.pod_steps[:2]
    assert steps[0] == steps[1] == pytest.approx(180, abs=1)  # step_time 1 s
    nvl = m(s, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")[TRAIN]  # MiB/s (DCGM field 449)
    assert (nvl > 250e9 / MIB).all()


def test_checkpoint_pauses_every_rank(sim: FleetSimulator) -> None:
    # Periodic checkpoint at 15m for 60 s: steps flat, util and power low, NVLink near zero.
    before, during, later = at(sim, 14.9), at(sim, 15.5), at(sim, 15.9)
    assert m(during, "DCGM_FI_DEV_GPU_UTIL")[TRAIN].max() < 20
    assert m(during, "DCGM_FI_DEV_POWER_USAGE")[TRAIN].max() < 200
    assert later.pod_steps[0] - during.pod_steps[0] == 0
    assert during.pod_steps[0] - before.pod_steps[0] < 10
    assert m(during, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")[TRAIN].max() < 5e9 / MIB
    assert m(at(sim, 21), "DCGM_FI_DEV_GPU_UTIL")[TRAIN].min() >= 90


def test_eval_phase_is_steadier_lower_load(sim: FleetSimulator) -> None:
    during = at(sim, 33)
    util = m(during, "DCGM_FI_DEV_GPU_UTIL")[TRAIN]
    assert 40 < util.mean() < 80
    assert at(sim, 33.5).pod_steps[0] == during.pod_steps[0]


def test_inference_idle_and_unallocated(sim: FleetSimulator) -> None:
    utils = [m(at(sim, x), "DCGM_FI_DEV_GPU_UTIL")[SERVE] for x in (1, 10, 20)]
    assert all(20 < u.mean() < 95 for u in utils)
    assert np.ptp(np.concatenate(utils)) > 0
    s = at(sim, 10)
    assert (m(s, "DCGM_FI_DEV_GPU_UTIL")[NOTEBOOK] == 0).all()
    assert (m(s, "DCGM_FI_DEV_FB_USED")[NOTEBOOK] > 0).all()
    assert (m(s, "DCGM_FI_DEV_FB_USED")[38:] == 0).all()
    assert (s.gpu_pod[38:] == -1).all() and (s.gpu_pod[NOTEBOOK] >= 0).all()
    idle = s.metrics["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"][38:].astype(int)
    assert (idle & 0x1).all()


def test_xid79_series_vanish_only_on_target_and_window(sim: FleetSimulator) -> None:
    for minutes, present in ((4.9, True), (5, False), (29.5, False), (31, True)):
        s = at(sim, minutes)
        assert bool(s.present[H100_2]) is present, minutes
        assert s.present[H100_2 + 1 : H100_2 + 8].all()
        assert np.isnan(m(s, "DCGM_FI_DEV_GPU_UTIL")[H100_2]) is not present
    assert 79 not in at(sim, 5).xid_counts


def test_xid48_and_row_remap_failure(sim: FleetSimulator) -> None:
    before, after, later = at(sim, 4.5), at(sim, 5.5), at(sim, 12)
    xid = m(after, "DCGM_FI_DEV_XID_ERRORS")
    # the 4.x layout (the default): XID 48 is followed by 45 at once, so the gauge shows 45
    assert xid[H100_2 + 1] == 45 and xid[H100_2 + 2] == 64
    assert after.xid_counts[45][H100_2 + 1] == 1
    others = np.delete(np.arange(40), [H100_2 + 1, H100_2 + 2])
    assert np.nansum(xid[others]) == 0 and np.nansum(m(before, "DCGM_FI_DEV_XID_ERRORS")) == 0
    dbe = m(after, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")
    assert dbe[H100_2 + 1] >= 1 and m(before, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")[H100_2 + 1] == 0
    assert after.xid_counts[48][H100_2 + 1] == 1 and after.xid_counts[64][H100_2 + 2] == 1
    assert 48 not in at(sim, 5 + XID_COUNT_WINDOW / MIN + 1).xid_counts
    rrf = m(later, "DCGM_FI_DEV_ROW_REMAP_FAILURE")
    assert rrf[H100_2 + 2] == 1 and np.nansum(rrf) == 1
    rows = m(later, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS")[H100_2 + 2]
    assert rows > m(after, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS")[H100_2 + 2] > 0


def test_throttle_faults(sim: FleetSimulator) -> None:
    for minutes in (0, 4.5, 21):
        raw = m(at(sim, minutes), "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
        assert not (np.nan_to_num(raw).astype(int) & HARMFUL).any(), minutes
    s = at(sim, 10)
    bits = np.nan_to_num(m(s, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")).astype(int)
    hot, braked = H100_2 + 3, H100_2 + 4
    assert bits[hot] & THERMAL_BITS == THERMAL_BITS
    assert bits[braked] & POWER_BRAKE
    assert np.flatnonzero(bits & HARMFUL).tolist() == [hot, braked]
    assert m(s, "DCGM_FI_DEV_GPU_TEMP")[hot] >= 85
    assert m(s, "DCGM_FI_DEV_SM_CLOCK")[braked] < 0.5 * 1980
    assert m(s, "DCGM_FI_DEV_POWER_USAGE")[braked] < 100


def test_interconnect_storms(sim: FleetSimulator) -> None:
    crc = rate(sim, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", 10, 12)
    assert crc[H100_2 + 5] > 100 and np.nansum(np.delete(crc, H100_2 + 5)) == 0
    assert rate(sim, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", 21, 23)[H100_2 + 5] == 0
    replay = rate(sim, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 10, 12)
    assert replay[H100_2 + 6] > 1
    assert np.nanmax(np.delete(replay, H100_2 + 6)) < 0.3


def test_straggler_slows_job_and_peers_wait(sim: FleetSimulator) -> None:
    s = at(sim, 15.5 + 2)  # in the window, outside the 15m checkpoint
    tensor = m(s, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")[TRAIN]
    util = m(s, "DCGM_FI_DEV_GPU_UTIL")[TRAIN]
    peers = np.delete(np.arange(16), STRAGGLER)
    gr = m(s, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")[TRAIN]
    assert tensor[STRAGGLER] > tensor[peers].max()
    # Waiting peers spin in NCCL kernels: utilisation and graphics engine stay busy (as on real
    # hardware), only their tensor pipe drops by the waiting share.
    assert util[peers].min() >= 90 and gr[peers].min() > 0.85
    before = m(at(sim, 8), "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")[peers].mean()
    assert tensor[peers].mean() < before / 1.15
    steps = (at(sim, 19).pod_steps[0] - at(sim, 17).pod_steps[0]) / (2 * MIN)
    assert steps == pytest.approx(1 / 1.25, rel=0.03)
    assert (at(sim, 23).pod_steps[0] - at(sim, 21).pod_steps[0]) / (2 * MIN) == pytest.approx(1)


def test_nccl_hang_signature(sim: FleetSimulator) -> None:
    s = at(sim, 25)
    assert m(s, "DCGM_FI_DEV_GPU_UTIL")[HANG].min() >= 95
    assert m(s, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")[HANG].max() < 0.02
    # A resident NCCL spin kernel keeps the graphics engine busy on real hardware.
    assert m(s, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")[HANG].min() > 0.9
    assert m(s, "DCGM_FI_DEV_POWER_USAGE")[HANG].max() < 58 + 0.2 * (400 - 58)
    hang_pod = 2
    assert at(sim, 27).pod_steps[hang_pod] == at(sim, 23).pod_steps[hang_pod]
    assert m(s, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")[HANG].max() < 1.0  # MiB/s
    assert at(sim, 21).pod_steps[hang_pod] > at(sim, 19).pod_steps[hang_pod]
    assert m(at(sim, 29), "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")[HANG].min() > 0.4


def test_job_start_and_finish(sim: FleetSimulator) -> None:
    assert (at(sim, 1).gpu_pod[HANG] == -1).all()
    assert (at(sim, 3).gpu_pod[HANG] == 2).all()
    assert (at(sim, 36).gpu_pod[HANG] == -1).all()
    assert np.isnan(at(sim, 36).pod_steps[2]) and np.isnan(at(sim, 1).pod_steps[2])


def test_exporter_down_and_scrape_gap(sim: FleetSimulator) -> None:
    s = at(sim, 6)
    a100_1 = np.arange(32, 40)
    assert not s.present[a100_1].any() and s.present[:16].all()
    assert s.exporter_up.tolist() == [True, True, True, True, False]
    assert np.isnan(m(s, "DCGM_FI_DEV_POWER_USAGE")[a100_1]).all()
    assert at(sim, 8).present[a100_1].all()
    gap = at(sim, 30.5)
    assert not gap.scrape_ok and not gap.present.any() and np.isnan(gap.pod_steps).all()
    assert at(sim, 31).scrape_ok


def test_live_placement_moves_a_pod(sim: FleetSimulator) -> None:
    sc = sim.scenario
    moved_at = sc.start + 10 * MIN
    pods = list(sim.layout.pods)
    nb = pods[5]  # notebook-0 on a100-0001 gpus 4,5
    pods[5] = dataclasses.replace(nb, end=moved_at)
    pods.append(dataclasses.replace(nb, node="h100-0002", gpu_indices=(7,), start=moved_at + 30))
    before = sim.sample(moved_at - 30, pods)
    after = sim.sample(moved_at + 60, pods)
    assert (before.gpu_pod[NOTEBOOK] == 5).all()
    assert (after.gpu_pod[NOTEBOOK] == -1).all() and after.gpu_pod[H100_2 + 7] == 6
    assert after.metrics["DCGM_FI_DEV_FB_USED"][H100_2 + 7] > 0


def test_fleet_without_workloads_is_idle() -> None:
    sc = scenario_from_dict(
        {
            "name": "empty",
            "pools": [{"name": "p", "model": "H200", "nodes": 1, "gpus_per_node": 2}],
            "faults": [{"kind": "xid48_dbe", "node": "p-0000", "gpu": 1, "start": "30s"}],
        }
    )
    s = FleetSimulator(sc).sample(sc.start + 60, [])
    assert s.gpu_pod.tolist() == [-1, -1] and s.pod_steps.size == 0
    assert s.metrics["DCGM_FI_DEV_XID_ERRORS"].tolist() == [0, 45]  # 48's follower (4.x)
    assert s.xid_counts[48].tolist() == [0, 1]
    assert (s.metrics["DCGM_FI_DEV_GPU_UTIL"] == 0).all()


_SIM = FleetSimulator(small())


@settings(max_examples=40, deadline=None)
@given(st.floats(0, 2400), st.floats(0, 2400))
def test_counters_never_decrease_between_any_two_times(a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    x, y = _SIM.sample(_SIM.scenario.start + lo), _SIM.sample(_SIM.scenario.start + hi)
    for spec in METRICS:
        if spec.kind == Kind.COUNTER:
            ok = ~np.isnan(x.metrics[spec.name]) & ~np.isnan(y.metrics[spec.name])
            assert (y.metrics[spec.name][ok] >= x.metrics[spec.name][ok]).all(), spec.name
    ok = ~np.isnan(x.pod_steps) & ~np.isnan(y.pod_steps)
    assert (y.pod_steps[ok] >= x.pod_steps[ok]).all()


def _confounded() -> FleetSimulator:
    doc = {
        "name": "confounded",
        "seed": 9,
        "duration": "30m",
        "scrape_interval": "30s",
        "pools": [{"name": "a100", "model": "A100", "nodes": 2}],
        "workloads": [{"name": "t", "kind": "training", "namespace": "ml", "replicas": 2}],
        "confounders": [
            {"kind": "app_xid", "job": "ml/t", "rank": 1, "xid": 31, "start": "5m", "end": "9m"},
            {"kind": "power_cap", "job": "ml/t", "cap": 0.6, "start": "10m", "end": "20m"},
        ],
    }
    return FleetSimulator(scenario_from_dict(doc))


def test_app_xid_and_power_cap_confounders() -> None:
    sim = _confounded()
    xid = m(at(sim, 6), "DCGM_FI_DEV_XID_ERRORS")
    assert xid[8] == 31 and np.count_nonzero(xid) == 1  # rank 1's first GPU only
    assert at(sim, 6).xid_counts[31][8] == 1
    assert m(at(sim, 10), "DCGM_FI_DEV_XID_ERRORS")[8] == 31  # sticky: the exporter kept it
    assert 31 not in at(sim, 12).xid_counts  # the count's 5-minute window is over
    before, capped = at(sim, 8), at(sim, 12)
    power = m(capped, "DCGM_FI_DEV_POWER_USAGE")
    assert power.max() <= 0.6 * 400 * 1.1  # held at the cap (plus per-GPU offsets and noise)
    assert m(before, "DCGM_FI_DEV_POWER_USAGE").min() > 0.6 * 400 * 1.1
    bits = m(capped, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS").astype(int)
    assert np.all(bits & 0x4) and not np.any(bits & 0xE8)  # SW power cap only, nothing harmful
    clock = m(capped, "DCGM_FI_DEV_SM_CLOCK")
    assert clock.max() < m(before, "DCGM_FI_DEV_SM_CLOCK").min()


def test_app_xid_must_be_an_application_code() -> None:
    from errors import ConfigError

    bad = {"kind": "app_xid", "node": "a100-0000", "gpu": 0, "xid": 79, "start": 0, "end": 60}
    with pytest.raises(ConfigError, match="13, 31, 43, 45"):
        scenario_from_dict(
            {"name": "x", "pools": [{"name": "a100", "model": "A100", "nodes": 1}],
             "confounders": [bad]}
        )  # fmt: skip
