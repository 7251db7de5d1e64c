"""Replay the detectors (and the policy, in dry-run) over a past window of Prometheus data.

What `gpufleet backtest`, `gpufleet detect` (a short warm-up window ending at T) and
`gpufleet eval` share. Snapshots come from `PrometheusCollector.collect_range` — each chunk's
raw samples read once, every step evaluated like a live instant cycle — and go through
`backtesting.replayer.Replayer` in time order, one or several suites side by side from one pass;
each cycle's findings go, with a cluster view of the same snapshot (rebuilt only when the
cluster changed), to
`remediations.decision_journal.ShadowReplay` — the live engine on an in-memory journal — as the
live loop
hands them over. Nothing here detects, collects or decides by itself: it only wires the live
parts to a past clock.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TextIO

from backtesting.replayer import Replayer, ReplayResult
from detectors.findings import Finding
from detectors.suite import CycleResult, DetectorSuite
from observer.fleet.model import FleetSnapshot
from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.plan import PromSettings
from remediations.cluster_view import SnapshotViews
from remediations.decision_journal import ShadowReplay
from remediations.decisions import ActionDecision
from remediations.policy import Policy

OnCycle = Callable[[float, FleetSnapshot, CycleResult], None]
OnEpisodes = Callable[[list[Finding]], None]
"""Called with the first suite's episodes so far (ended and open) whenever their number grew."""


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(slots=True)
class Progress:
    """One line on `out` (stderr) every `every` seconds: where the replay is and how long to go.
    Silent for windows that finish before the first report."""

    total: int
    label: str = "backtest"
    every: float = 5.0
    out: TextIO | None = None
    began: float = field(default_factory=time.monotonic)
    last: float = field(default_factory=time.monotonic)

    def __call__(self, done: int, t: float) -> None:
        now = time.monotonic()
        if now - self.last < self.every or done >= self.total:
            return
        self.last = now
        rate = done / max(now - self.began, 1e-9)
        left = (self.total - done) / rate if rate > 0 else float("inf")
        print(
            f"{self.label}: {iso(t)}  {done}/{self.total} steps ({100 * done / self.total:.0f} %),"
            f" {rate:.1f} steps/s, ~{left:.0f} s left",
            file=self.out or sys.stderr,
            flush=True,
        )


@dataclass(frozen=True, slots=True)
class ReplayRun:
    results: tuple[ReplayResult, ...]
    """One per suite, in the order given."""
    steps: int
    degraded_steps: int
    degraded_reasons: tuple[str, ...]
    """Distinct reasons (at most a few), for the summary line."""
    seconds: float
    last_t: float | None


def step_count(start: float, end: float, step: float) -> int:
    return int((end - start) // step) + 1 if end >= start else 0


def replay_window(
    collector: PrometheusCollector,
    start: float,
    end: float,
    step: float,
    suites: Sequence[tuple[DetectorSuite, int]],
    progress: Callable[[int, float], None] | None = None,
    on_cycle: OnCycle | None = None,
    on_episodes: OnEpisodes | None = None,
) -> ReplayRun:
    """Snapshots start, start+step, ... end from Prometheus, each fed to every suite in turn
    (`on_cycle` gets each snapshot and the first suite's cycle; `on_episodes` the partial
    result, so that a long replay shows what it found while it runs). Raises
    errors.TemporaryError or errors.PermanentError when Prometheus cannot answer at all."""
    began = time.perf_counter()
    replayers = [Replayer(suite, grace) for suite, grace in suites]
    steps = degraded = 0
    reasons: list[str] = []
    last_t: float | None = None
    shown = 0
    for r in collector.collect_range(start, end, step):
        snap = r.snapshot
        cycles = [rp.step(snap.taken_at, snap) for rp in replayers]
        if on_cycle is not None and cycles:
            on_cycle(snap.taken_at, snap, cycles[0])
        if on_episodes is not None and replayers:
            tracker = replayers[0].tracker
            if len(tracker.closed) + len(tracker.open) > shown:
                so_far = [*tracker.closed, *tracker.active()]
                shown = len(so_far)
                on_episodes(so_far)
        steps += 1
        last_t = snap.taken_at
        health = snap.telemetry
        if health is not None and not health.source_ok:
            degraded += 1
            reason = health.degraded_reason or "degraded"
            if reason not in reasons and len(reasons) < 3:
                reasons.append(reason)
        if progress is not None:
            progress(steps, snap.taken_at)
    results = tuple(rp.result() for rp in replayers)
    took = time.perf_counter() - began
    return ReplayRun(results, steps, degraded, tuple(reasons), took, last_t)


@dataclass(frozen=True, slots=True)
class Backtest:
    run: ReplayRun
    actions: tuple[ActionDecision, ...]
    decide_seconds: float

    @property
    def episodes(self) -> tuple[Finding, ...]:
        return self.run.results[0].episodes

    def to_json(self) -> dict[str, Any]:
        """Issue 4's contract: {"findings": [...], "actions": [...]}."""
        return {
            "findings": [f.to_json() for f in self.episodes],
            "actions": [a.to_json() for a in self.actions],
        }

    def summary(self) -> str:
        res = self.run.results[0]
        by_sev: dict[str, int] = {}
        for f in res.episodes:
            by_sev[f.severity.value] = by_sev.get(f.severity.value, 0) + 1
        sev = ", ".join(f"{n} {s}" for s, n in sorted(by_sev.items())) or "none"
        verdicts: dict[str, int] = {}
        for a in self.actions:
            verdicts[a.decision.value] = verdicts.get(a.decision.value, 0) + 1
        acts = ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items())) or "none"
        text = (
            f"{self.run.steps} steps in {self.run.seconds:.1f} s "
            f"(detectors {res.detector_seconds:.1f} s, decisions {self.decide_seconds:.1f} s); "
            f"{len(res.episodes)} finding episodes ({sev}); {len(self.actions)} actions ({acts})"
        )
        if self.run.degraded_steps:
            text += f"; {self.run.degraded_steps} steps on degraded data: " + " | ".join(
                self.run.degraded_reasons
            )
        if res.failures:
            names = sorted({f.detector for f in res.failures})
            text += f"; detector failures: {len(res.failures)} ({', '.join(names)}; see the log)"
        return text


@dataclass(frozen=True, slots=True)
class PrometheusFrames:
    """Snapshots of a Prometheus range replay at any steps (backtesting.sharded's source:
    picklable, each worker opens its own collector)."""

    settings: PromSettings

    def frames(
        self, start: float, end: float, step: float
    ) -> Iterator[tuple[float, FleetSnapshot]]:
        with PrometheusCollector(self.settings) as c:
            for r in c.collect_range(start, end, step):
                yield r.snapshot.taken_at, r.snapshot


def backtest(
    collector: PrometheusCollector,
    start: float,
    end: float,
    step: float,
    suite: DetectorSuite,
    grace_cycles: int,
    policy: Policy | None,
    progress: Callable[[int, float], None] | None = None,
    on_episodes: OnEpisodes | None = None,
) -> Backtest:
    """Detectors over [start, end] every `step`; each cycle's findings to the policy in
    dry-run, with the cluster (nodes, pods, jobs) as that step's snapshot shows it."""
    shadow = ShadowReplay(policy, started_at=start)
    views = SnapshotViews()
    spent = [0.0]

    def decide(t: float, snap: FleetSnapshot, cycle: CycleResult) -> None:
        t0 = time.perf_counter()
        shadow.step(cycle.findings, views(snap), t)
        spent[0] += time.perf_counter() - t0

    try:
        run = replay_window(
            collector, start, end, step, [(suite, grace_cycles)], progress, decide, on_episodes
        )
        return Backtest(run, tuple(shadow.decisions), spent[0])
    finally:
        shadow.close()


def current_findings(run: ReplayRun) -> list[Finding]:
    """The findings of the run's last cycle, each with its episode's onset (`first_seen`)."""
    if run.last_t is None:
        return []
    return [f for f in run.results[0].episodes if f.last_seen >= run.last_t]
