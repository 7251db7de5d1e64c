"""The detectors on simulated scenarios (demo + lab/suite), scored against ground truth.

Targets from issues 4 and 15: precision >= 0.95; recall >= 0.95 (>= 0.9 per kind) over the
faults above each detector's published limit (lab.fault_size: faults below it, as in
lab/suite/sweep-limits-30s.yaml, may be missed and are reported, not asserted); time to detect
<= 2 scrape intervals for XID/ECC/lost GPUs, <= 2 min for hangs, <= 5 min for stragglers 10 %
slower or more and <= 10 min for those between the 7 % limit and 10 %; no warning/critical
finding caused by a confounder. Run with the default lookback and with a 1-minute one.

Time to detect is judged the same way on the suite and on held-out scenarios: from the fault's
onset, less only the seconds in which it could not be seen at all (a fleet-wide scrape gap, the
exporter of its node down, and for a straggler its job's checkpoints and evaluation phases, when
no rank trains and the slow one cannot pace anybody). A fault visible throughout is held to the
target from its onset; both figures are in the failure message.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from detectors.suite import DetectorSuite
from lab.fault_size import FaultSize
from lab.scenario_gen import random_scenario
from lab.scoring import FaultResult, KindScore, Score
from lab.simulated import evaluate
from simulator.scenario import Scenario, demo_scenario, load_scenario

SUITE = Path(__file__).resolve().parents[1] / "lab" / "suite"
FAST = ("xid48_dbe", "row_remap_failure", "xid79_fallen_off_bus")
BIG_GPUS = 1024
"""Suite scenarios this large run at the default lookback only (the simulated path, ~6-10 s
each); the 1-minute-lookback variant runs on the smaller ones. The Prometheus-backed run of the
whole suite is `gpufleet eval --suite lab/suite` (by hand; figures in docs/backtest.md)."""


def _rules() -> DetectorSuite:
    """The default detectors without `anomaly`: it raises info only, so it cannot change what
    these tests judge, and it costs ~10x the replay time of the others (75 ms per cycle at 512
    GPUs). It is judged on lab/suite/novel-faults-30s in tests/test_novel_faults.py."""
    return DetectorSuite.default([n for n in DetectorSuite.default().names if n != "anomaly"])


def _scenarios() -> list[Scenario]:
    return [demo_scenario(), *(load_scenario(p) for p in sorted(SUITE.glob("*.yaml")))]


def _limit(kind: str, interval: float, size: float | None = None) -> float | None:
    if kind in FAST:
        return 2 * interval
    if kind == "straggler" and size is not None and size < 10.0:
        return 600.0  # near the 7 % limit the CUSUM needs ~4-9 min by design
    return {"nccl_hang": 120.0, "straggler": 300.0}.get(kind)


def _late(score: Score, interval: float) -> list[str]:
    """Faults found later than their kind's target, net of the seconds they were invisible."""
    late: list[str] = []
    for r in score.faults:
        limit = _limit(r.kind, interval, r.size.value)
        gross, net = r.ttd, r.ttd_seen
        if limit is not None and gross is not None and net is not None and net > limit:
            late.append(f"{r.kind} after {gross:.0f} s ({net:.0f} s seen; target {limit:.0f} s)")
    return late


def _check(score: Score, interval: float) -> None:
    above = [r for r in score.faults if r.size.above_limit]
    assert [r.id for r in above if not r.found] == [], score.table()
    assert score.recall_above_limit >= 0.95 and score.precision >= 0.95, score.table()
    assert score.fp_by_confounder == {}, score.table()
    for kind, (n, found) in score.above_limit_by_kind().items():
        assert found / n >= 0.9, (kind, score.table())
    assert _late(score, interval) == [], score.table()


def _cases() -> list[tuple[Scenario, float]]:
    return [
        (s, lookback)
        for s in _scenarios()
        for lookback in (300.0, 60.0)
        if lookback == 300.0 or s.gpu_count < BIG_GPUS
    ]


_CASES = _cases()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("scenario", "lookback"), _CASES, ids=[f"{s.name}-{lb:.0f}" for s, lb in _CASES]
)
def test_simulated_scenarios_meet_the_issue_targets(scenario: Scenario, lookback: float) -> None:
    result = evaluate(scenario, _rules(), lookback=lookback)
    assert result.result.failures == ()
    _check(result.score, scenario.scrape_interval)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2000, 2001, 2002, 2003])
def test_random_held_out_scenarios(seed: int) -> None:
    """Fleets, mixes, timings and seeds the suite never had (scenario_gen), same targets."""
    scenario = random_scenario(seed)
    result = evaluate(scenario, _rules())
    assert result.result.failures == ()
    _check(result.score, scenario.scrape_interval)


def test_time_to_detect_is_judged_net_of_invisible_time_only() -> None:
    def score(gross: float, net: float, slower: float = 25.0) -> Score:
        per = {"straggler": KindScore(1, 1, (gross,), (net,))}
        size = FaultSize(slower, "% slower", 7.0)
        return Score(
            per, 1, 1, (), {}, (), faults=(FaultResult("f", "straggler", size, True, gross, net),)
        )

    assert _late(score(280.0, 280.0), 30.0) == []
    assert _late(score(420.0, 300.0), 30.0) == []  # 2 min of checkpoint before it could be seen
    assert _late(score(330.0, 330.0), 30.0) == ["straggler after 330 s (330 s seen; target 300 s)"]
    assert _late(score(420.0, 420.0, slower=7.0), 30.0) == []  # at the limit: 10 min target
    assert _late(score(660.0, 660.0, slower=7.0), 30.0) != []
