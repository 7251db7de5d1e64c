"""Scoring: matching episodes to faults, precision over actionable episodes, blind time."""

from __future__ import annotations

from typing import Any

import pytest

from detectors.findings import Finding, FindingKind, Severity
from lab.scoring import blind_seconds, merge, score
from simulator.engine import FleetSimulator
from simulator.scenario import scenario_from_dict

T = 1_767_225_600.0
TRUTH: dict[str, list[dict[str, Any]]] = {
    "faults": [
        {
            "id": "f0",
            "kind": "xid48_dbe",
            "finding": "gpu_xid",
            "also": ["gpu_memory"],
            "node": "n1",
            "gpu_uuid": "GPU-a",
            "job": None,
            "job_nodes": [],
            "start": T + 100,
            "end": T + 1000,
        },
        {
            "id": "f1",
            "kind": "nccl_hang",
            "finding": "nccl_hang",
            "also": [],
            "node": None,
            "gpu_uuid": None,
            "job": "ml/j",
            "job_nodes": ["n2", "n3"],
            "start": T + 200,
            "end": T + 500,
        },
        {
            "id": "f2",
            "kind": "straggler",
            "finding": "straggler",
            "also": [],
            "node": "n3",
            "gpu_uuid": "GPU-s",
            "job": "ml/k",
            "job_nodes": ["n3"],
            "start": T + 600,
            "end": T + 900,
        },
    ],
    "confounders": [
        {
            "kind": "exporter_down",
            "node": "n9",
            "nodes": ["n9"],
            "job": None,
            "start": T + 300,
            "end": T + 400,
        },
        {
            "kind": "scrape_gap",
            "node": None,
            "nodes": [],
            "job": None,
            "start": T + 650,
            "end": T + 700,
        },
        {
            "kind": "checkpoint",
            "node": None,
            "nodes": ["n3"],
            "job": "ml/k",
            "start": T + 700,
            "end": T + 760,
        },
    ],
}


def _ep(kind: FindingKind, sev: Severity, at: float, end: float, **entity: Any) -> Finding:
    return Finding(kind, sev, "s", at, end, evidence={"detected_at": at}, **entity)


def test_faults_found_by_expected_kinds_and_extra_right_findings_are_not_false() -> None:
    eps = [
        _ep(FindingKind.GPU_XID, Severity.CRITICAL, T + 100, T + 1000, gpu_uuid="GPU-a"),
        _ep(FindingKind.GPU_MEMORY, Severity.CRITICAL, T + 130, T + 1000, gpu_uuid="GPU-a"),
        _ep(FindingKind.NCCL_HANG, Severity.CRITICAL, T + 260, T + 500, job="ml/j"),
        _ep(FindingKind.MONITORING_GAP, Severity.WARNING, T + 330, T + 400, node="n9"),
        _ep(FindingKind.GPU_IDLE, Severity.WARNING, T, T + 900, gpu_uuid="GPU-z"),
        _ep(FindingKind.MONITORING_GAP, Severity.INFO, T + 650, T + 700),
    ]
    s = score(eps, TRUTH)
    assert s.missed == ("f2",)
    assert s.per_fault_kind["nccl_hang"].ttd == (60.0,)
    assert (s.actionable, s.true_positive) == (4, 3)
    assert s.fp_by_confounder == {"exporter_down": 1}
    assert s.unscored == {"gpu_idle": 1} and s.info_episodes == 1
    assert 0 < s.f1 < 1
    both = merge([s, s])
    assert both.per_fault_kind["xid48_dbe"].faults == 2 and both.actionable == 8


def test_blind_time_counts_gaps_outages_on_its_nodes_and_straggler_pauses_once() -> None:
    confs = TRUTH["confounders"]
    straggler, hang = TRUTH["faults"][2], TRUTH["faults"][1]
    assert blind_seconds(straggler, confs, T + 900) == 50 + 60
    assert blind_seconds(hang, confs, T + 500) == 0  # n9 is not one of its nodes
    s = score(
        [
            _ep(
                FindingKind.STRAGGLER,
                Severity.WARNING,
                T + 900,
                T + 950,
                gpu_uuid="GPU-s",
                job="ml/k",
                node="n3",
            )
        ],
        TRUTH,
    )
    ks = s.per_fault_kind["straggler"]
    assert ks.ttd == (300.0,) and ks.ttd_seen == (190.0,)


def test_static_rules_baseline_pages_on_idle_gpus_and_misses_hangs() -> None:
    from detectors.signals import TENSOR_ACTIVE, UTIL, XID
    from lab.baseline import static_rules_suite
    from tests.fleet import Fleet

    fleet = Fleet(nodes=2).job("ml/t", [0])
    fleet.set(UTIL, 0.0, node=1).set(XID, 48.0, gpu=(0, 1))
    fleet.set(UTIL, 99.5, node=0).set(TENSOR_ACTIVE, 0.0, node=0)  # a hang: util pinned
    suite, state = static_rules_suite(), None
    for k in range(25):
        res = suite.run(fleet.snapshot(T + 30 * k), T + 30 * k, state)
        state = res.state
    kinds = {(f.kind, f.gpu_uuid) for f in res.findings}
    assert (FindingKind.GPU_XID, "GPU-000-1") in kinds
    assert sum(1 for k, _ in kinds if k == FindingKind.ANOMALY) == 8  # every idle GPU pages
    assert not any(k == FindingKind.NCCL_HANG for k, _ in kinds)


def _small(faults: list[dict[str, Any]], confounders: list[dict[str, Any]]) -> Any:
    from simulator.scenario import scenario_from_dict

    return scenario_from_dict(
        {
            "name": "small",
            "seed": 3,
            "duration": "30m",
            "scrape_interval": "30s",
            "pools": [{"name": "a100", "model": "A100", "nodes": 3}],
            "workloads": [
                {"name": "t", "kind": "training", "namespace": "ml", "replicas": 2},
                {"name": "s", "kind": "inference", "namespace": "sv", "gpus_per_pod": 8},
            ],
            "faults": faults,
            "confounders": confounders,
        }
    )


def test_static_rules_baseline_has_lost_gpu_and_link_error_rules() -> None:
    """The fair baseline: a lost GPU, an NVLink CRC storm and a PCIe replay storm are each
    found by a static rule of the right kind; an exporter outage pages as up == 0."""
    from lab.baseline import static_rules_suite
    from lab.simulated import evaluate

    sc = _small(
        [
            {"kind": "xid79_fallen_off_bus", "job": "ml/t", "rank": 1, "gpu": 2, "start": "5m"},
            {"kind": "nvlink_crc_storm", "job": "ml/t", "rank": 0, "start": "5m", "end": "15m"},
            {"kind": "pcie_replay_storm", "job": "sv/s", "gpu": 4, "start": "5m", "end": "15m"},
        ],
        [{"kind": "exporter_down", "node": "a100-0002", "start": "20m", "end": "28m"}],
    )
    s = evaluate(sc, suite=static_rules_suite()).score
    assert s.missed == (), s.table()
    found = {r.kind: r.ttd for r in s.faults}
    lost = found["xid79_fallen_off_bus"]
    assert lost is not None and lost >= 300 - 30  # absent only once the lookback has passed
    assert s.fp_by_confounder.get("exporter_down", 0) >= 1


def test_off_kind_findings_on_the_faulty_entity_are_not_true_positives() -> None:
    eps = [
        _ep(FindingKind.GPU_XID, Severity.CRITICAL, T + 100, T + 1000, gpu_uuid="GPU-a"),
        _ep(FindingKind.GPU_THROTTLE, Severity.WARNING, T + 150, T + 1000, gpu_uuid="GPU-a"),
        _ep(FindingKind.GPU_THROTTLE, Severity.WARNING, T + 250, T + 400, job="ml/j", gpu_uuid="x"),
        _ep(FindingKind.STRAGGLER, Severity.WARNING, T + 650, T + 900, gpu_uuid="GPU-other"),
    ]
    s = score(eps, TRUTH)
    assert s.true_positive == 1 and s.actionable == 4
    assert [f.kind for f in s.off_kind] == [FindingKind.GPU_THROTTLE, FindingKind.GPU_THROTTLE]
    assert len(s.false_positives) == 1  # a straggler on a GPU that is not the faulty one
    assert s.precision == 0.5 and s.strict_precision == 0.25
    assert s.missed == ("f1", "f2")


def test_fault_sizes_against_published_limits() -> None:
    from lab.fault_size import fault_size

    mild = fault_size({"kind": "straggler", "severity": 0.2})
    assert (mild.value, mild.unit, mild.above_limit) == (5.0, "% slower", False)
    assert fault_size({"kind": "straggler", "severity": 0.4}).above_limit
    assert not fault_size({"kind": "nvlink_crc_storm", "severity": 0.15}).above_limit
    assert fault_size({"kind": "pcie_replay_storm", "severity": 0.012}).above_limit
    assert fault_size({"kind": "xid48_dbe", "severity": 1.0}).above_limit


def test_throttle_faults_are_sized_by_episode_length_or_by_clock_drop() -> None:
    """Where clock-event reasons are collected gpu_throttle needs the bits for 60 s; where they
    are not, an SM clock 20 % below its busy peers. The size follows what the detector sees."""
    from lab.fault_size import fault_size

    short = {"kind": "thermal_throttle", "severity": 1.0, "start": 100.0, "end": 145.0}
    assert (fault_size(short).value, fault_size(short).above_limit) == (45.0, False)
    long = {**short, "end": 160.0, "model": "A100"}
    assert fault_size(long).unit == "s episode" and fault_size(long).above_limit
    mild = fault_size({**long, "severity": 0.7}, clock_reasons=False)
    assert (mild.unit, mild.limit, mild.above_limit) == ("% clock drop", 20.0, False)
    assert 17.0 < mild.value < 19.0  # type: ignore[operator]
    brake = fault_size({"kind": "power_brake", "severity": 1.0, "model": "H100"}, 30.0, False)
    assert brake.above_limit and 55.0 < brake.value < 60.0  # type: ignore[operator]
    mild_brake = fault_size({"kind": "power_brake", "severity": 0.5}, 30.0, False)
    assert (mild_brake.limit, mild_brake.above_limit) == (40.0, False)  # a cap looks the same


def test_a_mild_power_brake_caps_the_clock_and_never_raises_power() -> None:
    from simulator.levels import throttle_clock_factor

    assert throttle_clock_factor("power_brake", 0.2) == 1.0  # 0.3/0.2 > 1: no cut
    assert throttle_clock_factor("power_brake", 1.0) == pytest.approx(0.3)
    assert throttle_clock_factor("thermal_throttle", 0.5) == pytest.approx(0.85)
    sim = FleetSimulator(
        scenario_from_dict(
            {
                "name": "brake",
                "seed": 1,
                "duration": "20m",
                "pools": [{"name": "h100", "model": "H100", "nodes": 1}],
                "workloads": [{"name": "t", "kind": "training", "replicas": 1}],
                "faults": [
                    {"kind": "power_brake", "node": "h100-0000", "gpu": 1, "start": "5m",
                     "severity": 0.2},
                    {"kind": "power_brake", "node": "h100-0000", "gpu": 2, "start": "5m"},
                ],
            }
        )
    )  # fmt: skip
    before, during = (sim.sample(sim.scenario.start + m * 60.0).metrics for m in (4, 10))
    power = "DCGM_FI_DEV_POWER_USAGE"
    assert during[power][1] <= before[power][1] * 1.05  # mild: no more power than before
    assert during[power][2] < 0.6 * before[power][2]  # full brake: power far below load
    assert during["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"][1] == 0x80


def test_a_straggler_exactly_at_the_limit_is_above_it() -> None:
    """100 * 0.07 is 7.000000000000001 in floating point; 7 % slower must still count."""
    from lab.fault_size import fault_size

    assert fault_size({"kind": "straggler", "severity": 0.28}).above_limit
