"""Detector framework: keyed state survives churn, the suite isolates failures, episodes merge."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from backtesting.episodes import EpisodeTracker
from detectors.base import DetectorSpec
from detectors.findings import Finding, FindingKind, Severity
from detectors.registry import bind, registry
from detectors.state import align, empty
from detectors.suite import DetectorSuite
from detectors.tuning import suite_from_section
from errors import ConfigError
from tests.fleet import Fleet

SPEC = {"acc": (np.float32, 0.0), "onset": (np.float64, np.nan)}


def test_align_carries_rows_by_key_and_fills_new_ones() -> None:
    old = empty(np.array(["a", "b", "c"], dtype=object), SPEC)
    old = old.replace(acc=np.array([1.0, 2.0, 3.0], dtype=np.float32))
    new = align(old, np.array(["c", "x", "a"], dtype=object), SPEC)
    assert new["acc"].tolist() == [3.0, 0.0, 1.0]
    assert np.isnan(new["onset"]).all()
    same = align(old, old.keys, SPEC)
    assert same is old


def test_every_builtin_registers_with_frozen_params() -> None:
    specs = registry()
    assert set(specs) == {k.value for k in FindingKind}
    for spec in specs.values():
        params = spec.params_type()
        first = dataclasses.fields(params)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(params, first, 1)
        assert hasattr(spec.params_type, "__slots__")


def test_suite_isolates_a_failing_detector() -> None:
    def boom(*_: object) -> tuple[list[Finding], object]:
        raise RuntimeError("bug")

    bad = bind("gpu_xid")
    bad = type(bad)(DetectorSpec("boom", object, boom, ()), None)
    suite = DetectorSuite((bad, bind("gpu_lost")))
    fleet = Fleet(nodes=2)
    fleet.stale(120.0, gpu=(0, 3))
    res = suite.run(fleet.snapshot(1000.0), 1000.0)
    assert [f.kind for f in res.findings] == [FindingKind.GPU_LOST]
    assert res.failures[0].detector == "boom"
    assert res.state.failures["boom"] == 1
    res2 = suite.run(fleet.snapshot(1030.0), 1030.0, res.state)
    assert res2.state.failures["boom"] == 2


def test_default_suite_runs_clean_on_a_healthy_fleet() -> None:
    fleet = Fleet(nodes=4).job("ml/t", [0, 1, 2, 3])
    suite = DetectorSuite.default()
    state = None
    for t in range(0, 600, 30):
        res = suite.run(fleet.snapshot(float(t)), float(t), state)
        state = res.state
        assert res.findings == () and res.failures == ()
    assert state is not None and state.nbytes() > 0


def _f(t: float, sev: Severity = Severity.WARNING, gpu: str = "g1") -> Finding:
    return Finding(FindingKind.GPU_THROTTLE, sev, "s", t - 10, t, node="n", gpu_uuid=gpu)


def test_episode_tracker_merges_cycles_and_splits_on_silence() -> None:
    tr = EpisodeTracker()
    tr.observe(100, [_f(100)])
    tr.observe(130, [_f(130, Severity.CRITICAL), _f(130, gpu="g2")])
    tr.observe(160, [_f(160)])
    tr.observe(190, [])
    tr.observe(220, [_f(220)])
    eps = tr.finish()
    g1 = [e for e in eps if e.gpu_uuid == "g1"]
    assert len(g1) == 2
    assert (g1[0].first_seen, g1[0].last_seen, g1[0].severity) == (90, 160, Severity.CRITICAL)
    assert g1[0].evidence["detected_at"] == 100
    assert g1[1].first_seen == 210
    grace = EpisodeTracker(grace_cycles=1)
    for t, found in ((100, [_f(100)]), (130, []), (160, [_f(160)])):
        grace.observe(t, found)
    assert len(grace.finish()) == 1


def test_config_section_builds_a_suite_and_names_bad_fields() -> None:
    suite = suite_from_section(
        {
            "straggler": {"min_seconds": "4m"},
            "gpu_idle": {"enabled": False},
            "anomaly": {"enabled": True},
        }
    )
    assert "gpu_idle" not in suite.names and "anomaly" in suite.names
    strag = next(d for d in suite.detectors if d.name == "straggler")
    assert strag.params.min_seconds == 240.0
    with pytest.raises(ConfigError) as err:
        suite_from_section({"straggler": {"min_gap": "high", "typo": 1}}, "gpufleet.yaml")
    text = str(err.value)
    assert "gpufleet.yaml: detectors.straggler.min_gap: expected" in text
    assert "detectors.straggler.typo: unknown field" in text
    with pytest.raises(ConfigError):
        suite_from_section({"nope": {}}, "x.yaml")


def test_job_finish_and_counter_resets_raise_nothing_across_the_suite() -> None:
    from detectors.gpu_interconnect import NVLINK_CRC, PCIE_REPLAY
    from detectors.signals import GR_ACTIVE, POWER, TENSOR_ACTIVE, UTIL

    fleet = Fleet(nodes=4).job("ml/t", [0, 1, 2, 3])
    suite = DetectorSuite.default()
    state = None
    t0 = 1_767_225_600.0
    for k in range(40):
        now = t0 + 30 * k
        if k == 10:  # exporters restart: counters reset (a collector that missed it says < 0)
            fleet.set_increase(PCIE_REPLAY, -1e6).set_increase(NVLINK_CRC, -5e5)
        if k == 11:
            fleet.set_increase(PCIE_REPLAY, 0.0).set_increase(NVLINK_CRC, 0.0)
        if k == 20:  # the job finishes: pods gone, GPUs idle and unallocated
            fleet.jobs.clear()
            fleet.pods.clear()
            fleet.set(UTIL, 0.0).set(GR_ACTIVE, 0.0).set(TENSOR_ACTIVE, 0.0).set(POWER, 70.0)
        res = suite.run(fleet.snapshot(now), now, state)
        state = res.state
        assert res.findings == (), (k, res.findings)


def test_mig_slices_are_distinct_state_rows() -> None:
    from detectors.state import gpu_keys

    snap = Fleet(nodes=1, gpus_per_node=2).snapshot(0.0)
    mig = np.array(["1", "2"], dtype=object)
    table = dataclasses.replace(
        snap.gpus, uuid=np.array(["GPU-x", "GPU-x"], dtype=object), mig_instance=mig
    )
    keys = gpu_keys(dataclasses.replace(snap, gpus=table))
    assert keys.tolist() == ["GPU-x/1", "GPU-x/2"]


def test_a_gpu_episode_survives_its_job_ending() -> None:
    from detectors.signals import XID

    fleet = Fleet(nodes=2).job("ml/t", [0, 1]).set(XID, 48.0, gpu=(0, 3))
    suite = DetectorSuite.default(["gpu_xid"])
    tracker = EpisodeTracker()
    state = None
    for k in range(20):
        now = 1_767_225_600.0 + 30 * k
        if k == 10:
            fleet.jobs.clear()
            fleet.pods.clear()
        res = suite.run(fleet.snapshot(now), now, state)
        state = res.state
        tracker.observe(now, res.findings)
    assert len(tracker.finish()) == 1


def test_episodes_bridge_cycles_in_which_their_node_or_the_fleet_is_blind() -> None:
    gap_node = Finding(FindingKind.MONITORING_GAP, Severity.INFO, "gap", 130, 130, node="n")
    gap_fleet = Finding(FindingKind.MONITORING_GAP, Severity.INFO, "gap", 160, 160)
    tr = EpisodeTracker()
    tr.observe(100, [_f(100)])
    tr.observe(130, [gap_node])
    tr.observe(160, [gap_fleet])
    tr.observe(190, [_f(190)])
    lost = [e for e in tr.finish() if e.kind == FindingKind.GPU_THROTTLE]
    assert len(lost) == 1 and (lost[0].first_seen, lost[0].last_seen) == (90, 190)


def test_a_snapshot_without_telemetry_health_is_judged_from_sample_ages() -> None:
    fleet = Fleet(nodes=2).stale(100.0, gpu=(1, 1))
    snap = dataclasses.replace(fleet.snapshot(1000.0), telemetry=None)
    res = DetectorSuite.default().run(snap, 1000.0)
    assert res.failures == ()
    assert [(f.kind, f.gpu_uuid) for f in res.findings] == [(FindingKind.GPU_LOST, "GPU-001-1")]
