"""Evaluate the detectors on a simulated scenario, without Prometheus: simulate, replay, score.

The fast loop for tuning on physical grounds and for CI: the scenario's samples become
snapshots through simulator.snapshot (Prometheus lookback and `increase()` semantics),
the suite replays them at `step` seconds, and the episodes are scored against the scenario's
ground truth. `gpufleet eval` does the same through a real, backfilled Prometheus.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from backtesting.replayer import ReplayResult, replay
from detectors.suite import DetectorSuite
from lab.scoring import Score, score
from observer.fleet.model import FleetSnapshot
from observer.promql import DEFAULT_LOOKBACK
from simulator.engine import FleetSimulator
from simulator.scenario import Scenario
from simulator.snapshot import SimSnapshots
from simulator.truth import ground_truth


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    scenario: str
    result: ReplayResult
    score: Score


def frames(
    sim: FleetSimulator, step: float, window: float, lookback: float
) -> Iterator[tuple[float, FleetSnapshot]]:
    snaps = SimSnapshots(sim, window=window, lookback=lookback)
    sc = sim.scenario
    t = sc.start + step
    while t <= sc.end:
        yield t, snaps.snapshot(t)
        t += step


@dataclass(frozen=True, slots=True)
class SimulatedFrames:
    """A scenario's snapshots on the simulated path at any steps (backtesting.sharded's source:
    picklable, each worker builds its own simulator)."""

    scenario: Scenario
    window: float = 120.0
    lookback: float = DEFAULT_LOOKBACK

    def frames(
        self, start: float, end: float, step: float
    ) -> Iterator[tuple[float, FleetSnapshot]]:
        snaps = SimSnapshots(FleetSimulator(self.scenario), self.window, self.lookback)
        t = start
        while t <= end:
            yield t, snaps.snapshot(t)
            t += step


def evaluate(
    scenario: Scenario,
    suite: DetectorSuite | None = None,
    step: float | None = None,
    window: float = 120.0,
    lookback: float = DEFAULT_LOOKBACK,
) -> ScenarioResult:
    sim = FleetSimulator(scenario)
    run = replay(
        suite or DetectorSuite.default(),
        frames(sim, step or scenario.scrape_interval, window, lookback),
    )
    truth = ground_truth(scenario, sim.layout)
    return ScenarioResult(scenario.name, run, score(run.episodes, truth))
