"""Replay: snapshots in time order -> the suite, cycle by cycle -> one finding per episode.

What `backtest` (snapshots from Prometheus at each step), `eval` (from a backfilled Prometheus)
and the simulated suite (from observer.simulator.snapshot) all call, so history is replayed
through the live code path, never reimplemented.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from detectors.episodes import EpisodeTracker
from detectors.findings import Finding
from detectors.suite import DetectorFailure, DetectorSuite, SuiteState
from observer.model import FleetSnapshot


@dataclass(frozen=True, slots=True)
class ReplayResult:
    episodes: tuple[Finding, ...]
    failures: tuple[DetectorFailure, ...]
    cycles: int
    detector_seconds: float
    """Wall seconds spent in detectors (not in building snapshots)."""
    state: SuiteState


def replay(
    suite: DetectorSuite,
    frames: Iterable[tuple[float, FleetSnapshot]],
    grace_cycles: int = 0,
    state: SuiteState | None = None,
) -> ReplayResult:
    """Run `suite` over (now, snapshot) frames in time order and merge findings into episodes."""
    tracker = EpisodeTracker(grace_cycles=grace_cycles)
    failures: list[DetectorFailure] = []
    cycles = 0
    seconds = 0.0
    cur = state or SuiteState()
    for now, snapshot in frames:
        res = suite.run(snapshot, now, cur)
        cur = res.state
        tracker.observe(now, res.findings)
        failures.extend(res.failures)
        seconds += sum(res.seconds.values())
        cycles += 1
    return ReplayResult(tuple(tracker.finish()), tuple(failures), cycles, seconds, cur)
