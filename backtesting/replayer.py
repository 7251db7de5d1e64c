"""Replay: snapshots in time order -> the suite, cycle by cycle -> one finding per episode.

What `backtest` (snapshots from Prometheus at each step), `eval` (from a backfilled Prometheus)
and the simulated suite (from simulator.snapshot) all call, so history is replayed
through the live code path, never reimplemented. `Replayer` is the same loop one step at a time,
for callers that feed several suites from one pass over the snapshots (`eval`: detectors and
the static-rule baseline side by side) or act on each cycle's findings.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from backtesting.episodes import EpisodeTracker
from detectors.findings import Finding
from detectors.suite import CycleResult, DetectorFailure, DetectorSuite, SuiteState
from observer.fleet.model import FleetSnapshot


@dataclass(frozen=True, slots=True)
class ReplayResult:
    episodes: tuple[Finding, ...]
    failures: tuple[DetectorFailure, ...]
    cycles: int
    detector_seconds: float
    """Wall seconds spent in detectors (not in building snapshots)."""
    state: SuiteState


@dataclass(slots=True)
class Replayer:
    """`step(now, snapshot)` in time order, then `result()`."""

    suite: DetectorSuite
    grace_cycles: int = 0
    state: SuiteState = field(default_factory=SuiteState)
    tracker: EpisodeTracker = field(init=False)
    failures: list[DetectorFailure] = field(default_factory=list)
    cycles: int = 0
    seconds: float = 0.0

    def __post_init__(self) -> None:
        self.tracker = EpisodeTracker(grace_cycles=self.grace_cycles)

    def step(self, now: float, snapshot: FleetSnapshot) -> CycleResult:
        res = self.suite.run(snapshot, now, self.state)
        self.state = res.state
        self.tracker.observe(now, res.findings)
        self.failures.extend(res.failures)
        self.seconds += sum(res.seconds.values())
        self.cycles += 1
        return res

    def result(self) -> ReplayResult:
        return ReplayResult(
            tuple(self.tracker.finish()), tuple(self.failures), self.cycles, self.seconds,
            self.state,
        )  # fmt: skip


def replay(
    suite: DetectorSuite,
    frames: Iterable[tuple[float, FleetSnapshot]],
    grace_cycles: int = 0,
    state: SuiteState | None = None,
) -> ReplayResult:
    """Run `suite` over (now, snapshot) frames in time order and merge findings into episodes."""
    r = Replayer(suite, grace_cycles, state or SuiteState())
    for now, snapshot in frames:
        r.step(now, snapshot)
    return r.result()
