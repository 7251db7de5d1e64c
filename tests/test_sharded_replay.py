"""A window replayed in time shards on two processes finds what a sequential replay finds.

backtesting.sharded warms each shard up on the time before it for the longest memory any
detector declares, then merges the shards' cycles into one episode tracker. The proof is the
suite: episodes byte-identical (as JSON) to a sequential replay of the same scenario, but for
one explained field (a straggler's `persisted_s` when its episode began before a shard's
warm-up).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backtesting.backtest import PrometheusFrames, replay_window
from backtesting.replayer import replay
from backtesting.sharded import plan, replay_sharded, warmup_seconds
from detectors.findings import Finding
from detectors.suite import DetectorSuite
from lab.simulated import SimulatedFrames, frames
from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.plan import PromSettings
from simulator.engine import FleetSimulator
from simulator.scenario import load_scenario, scenario_from_dict
from tests.prometheus_fixture import start_prometheus, write_scenario
from tests.test_cli_detect_backtest_eval import TINY

SUITE = Path(__file__).resolve().parents[1] / "lab" / "suite"


def test_plan_covers_the_window_once_with_warm_ups_that_never_start_before_it() -> None:
    shards = plan(0.0, 2970.0, 30.0, 3, warmup=600.0)  # 100 steps
    assert [(s.warm_from, s.start, s.end) for s in shards] == [
        (0.0, 0.0, 990.0),
        (420.0, 1020.0, 2010.0),
        (1440.0, 2040.0, 2970.0),
    ]
    assert plan(0.0, 60.0, 30.0, 8, warmup=0.0)[-1].end == 60.0
    assert len(plan(0.0, 60.0, 30.0, 8, warmup=0.0)) == 3


def test_warm_up_is_the_longest_memory_a_detector_declares() -> None:
    suite = DetectorSuite.default()
    assert warmup_seconds(DetectorSuite.default(["anomaly"])) == 600.0 + 300.0
    assert warmup_seconds(DetectorSuite.default(["gpu_lost"])) == 3600.0
    assert warmup_seconds(suite) == max(
        warmup_seconds(DetectorSuite((d,))) for d in suite.detectors
    )


def _episodes(episodes: tuple[Finding, ...]) -> list[str]:
    """Episodes as JSON, without `persisted_s`: how long a straggler's evidence has persisted
    counts from the start of its replay's state, so an episode that began before a shard's
    warm-up shows a shorter span in that shard (checked separately below)."""
    out = []
    for f in episodes:
        j = f.to_json()
        j["evidence"].pop("persisted_s", None)
        out.append(json.dumps(j, sort_keys=True))
    return out


@pytest.mark.slow
def test_two_shards_on_two_processes_give_the_sequential_episodes_byte_for_byte() -> None:
    """a100-64-15s, its first hour at 30 s steps: stragglers, a hang, XIDs, thermal and power
    brake, NVLink and PCIe storms, confounders. Every default detector but gpu_idle and gpu_lost
    (their 4.5 h and 1 h memories would make the warm-up cover this short window): the warm-up
    is the straggler's 21 minutes, so the second shard starts cold 9 minutes in."""
    sc = load_scenario(SUITE / "a100-64-15s.yaml")
    names = [n for n in DetectorSuite.default().names if n not in ("gpu_idle", "gpu_lost")]
    suite = DetectorSuite.default(names)
    step = 2 * sc.scrape_interval  # 30 s steps over 15 s scrapes: half the cycles to replay
    start, end = sc.start + step, sc.start + 3600.0
    sequential = replay(
        suite, ((t, s) for t, s in frames(FleetSimulator(sc), step, 120.0, 300.0) if t <= end)
    )
    seen: list[int] = []
    run = replay_sharded(
        SimulatedFrames(sc, 120.0, 300.0), suite, start, end, step, shards=2, workers=2,
        on_shard=lambda out, so_far: seen.append(len(so_far)),
    )  # fmt: skip
    assert len(run.shards) == 2 and run.shards[1].warm_from > start  # not a second full replay
    assert run.result.cycles == sequential.cycles
    assert len(sequential.episodes) >= 5
    assert _episodes(run.result.episodes) == _episodes(sequential.episodes)
    for a, b in zip(run.result.episodes, sequential.episodes, strict=True):
        if a.evidence.get("persisted_s") != b.evidence.get("persisted_s"):
            assert a.first_seen < run.shards[1].warm_from < a.last_seen  # began before it
    assert len(seen) == 2 and 0 < seen[0] <= seen[1]


@pytest.mark.prometheus
def test_a_prometheus_range_replay_in_two_shards_gives_the_sequential_episodes(
    tmp_path: Path,
) -> None:
    """Each shard opens its own collector, which starts cold (no counter or GPU memory) at its
    warm-up: 40 minutes of a small fleet with an XID 48, a hang and an exporter outage, the
    detectors whose memory is at most 15 minutes; the second shard starts cold 5 minutes in."""
    sc = scenario_from_dict({**TINY, "duration": "40m"}, "tiny-40")
    prom = start_prometheus(write_scenario(sc, tmp_path / "tiny.om"), tmp_path)
    try:
        keep = ("monitoring_gap", "gpu_xid", "gpu_memory", "gpu_throttle", "nccl_hang", "anomaly")
        suite = DetectorSuite.default(keep)
        settings = PromSettings(prom.url, timeout=30.0)
        start, end, step = sc.start + 30, sc.end, 30.0
        with PrometheusCollector(settings) as c:
            sequential = replay_window(c, start, end, step, [(suite, 0)]).results[0]
        run = replay_sharded(PrometheusFrames(settings), suite, start, end, step, 2, 2)
    finally:
        prom.stop()
    assert warmup_seconds(suite) == 900.0 and run.shards[1].warm_from == sc.start + 330
    assert len(sequential.episodes) >= 3
    assert len(run.result.episodes) == len(sequential.episodes)
    for a, b in zip(run.result.episodes, sequential.episodes, strict=True):
        ja, jb = a.to_json(), b.to_json()
        if ja == jb:
            continue
        # Explained: the XID gauge holds its last value, so to a shard whose warm-up starts after
        # the XID, it is "present before gpufleet started": the summary says so, the evidence
        # has `pre_existing` and the first sight as `last_occurrence`. Kind, GPU, severity,
        # onset and end are the sequential replay's.
        assert a.kind.value == "gpu_xid" and b.first_seen < run.shards[1].warm_from
        top = {k for k in ja if ja[k] != jb[k]}
        ev = {k for k in set(ja["evidence"]) | set(jb["evidence"])
              if ja["evidence"].get(k) != jb["evidence"].get(k)}  # fmt: skip
        assert top <= {"evidence", "summary"}, (top, ja, jb)
        assert ev <= {"pre_existing", "last_occurrence"}, (ev, ja, jb)
