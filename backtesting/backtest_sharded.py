"""`gpufleet backtest` and the What-if page on several cores: the detectors in time shards
(backtesting.sharded), the policy in dry-run in this process, in time order.

Each worker replays its shard of Prometheus history and notes, per counted cycle, the cluster
view of that cycle's snapshot when it changed (rebuilt as rarely as the sequential backtest
does: remediations.cluster_view.SnapshotViews) and why the data was degraded, if it was. The parent
feeds each shard's cycles, as they arrive in order, to one dry-run engine — the same calls,
with the same findings and views, as `backtesting.backtest.backtest` makes — so the decisions are
the sequential backtest's; only the engine stays sequential (1.2 of 26.6 s of the 24 h x 1k-GPU
replay before sharding). With fewer than two shards worth running it is that sequential backtest.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import cast

from backtesting.backtest import Backtest, OnEpisodes, PrometheusFrames, ReplayRun
from backtesting.backtest import backtest as sequential_backtest
from backtesting.sharded import ShardOutput, replay_sharded, restored, warmup_seconds
from detectors.findings import Finding
from detectors.suite import DetectorSuite
from observer.fleet.model import FleetSnapshot
from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.plan import PromSettings
from remediations.cluster_view import ClusterView, SnapshotViews
from remediations.decision_journal import ShadowReplay
from remediations.policy import Policy

CORES_PER_SHARD = 2
"""A shard keeps about one and a half cores busy: its detectors, and beside them its sample
parsers and the Prometheus answering it (24 h x 1k GPUs, sequential: 89 CPU s in 58 s wall).
On 2 cores two shards were slower than one (62 s against 58 s, docs/performance.md)."""


def default_shards() -> int:
    """One shard per two CPUs this process may use (at least one)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    return max(1, cpus // CORES_PER_SHARD)


def shards_worth(shards: int, window: float, warmup: float) -> int:
    """The most shards, up to `shards`, that finish sooner than one sequential replay: k shards
    each replay window/k plus a warm-up, which pays only while warmup < window x (1 - 1/k)."""
    for k in range(max(1, shards), 1, -1):
        if warmup < window * (1.0 - 1.0 / k):
            return k
    return 1


@dataclass(slots=True)
class CycleNotes:
    """Per counted cycle in a worker: (the cluster view if it changed since the last cycle,
    else None; the reason the data was degraded, else None). Picklable: sent to each worker."""

    views: SnapshotViews = field(default_factory=SnapshotViews)
    last: ClusterView | None = None

    def __call__(self, snap: FleetSnapshot) -> tuple[ClusterView | None, str | None]:
        self.views(snap)
        built = self.views.built
        changed = built is not self.last
        self.last = built
        health = snap.telemetry
        degraded = None
        if health is not None and not health.source_ok:
            degraded = health.degraded_reason or "degraded"
        return (built if changed else None), degraded


def backtest_sharded(
    settings: PromSettings,
    start: float,
    end: float,
    step: float,
    suite: DetectorSuite,
    grace_cycles: int,
    policy: Policy | None,
    shards: int,
    progress: Callable[[int, float], None] | None = None,
    on_episodes: OnEpisodes | None = None,
) -> Backtest:
    """`backtesting.backtest.backtest` over [start, end] in up to `shards` worker processes
    (`shards_worth`); `progress(steps done, time)` every few tenths of a second. An exception
    from a callback (a cancelled run) stops the workers and propagates."""
    k = shards_worth(shards, end - start, warmup_seconds(suite))
    if k <= 1:
        with PrometheusCollector(settings) as c:
            return sequential_backtest(
                c, start, end, step, suite, grace_cycles, policy, progress, on_episodes
            )
    shadow = ShadowReplay(policy, started_at=start)
    spent = [0.0]
    view: list[ClusterView | None] = [None]
    degraded: list[str] = []
    steps = [0]
    last_t: list[float | None] = [None]

    def decide(out: ShardOutput, so_far: list[Finding]) -> None:
        t0 = time.perf_counter()
        for (now, found), note in zip(out.cycles, out.notes, strict=True):
            changed, why = cast(tuple[ClusterView | None, str | None], note)
            view[0] = changed if changed is not None else view[0]
            current = replace(view[0], taken_at=now) if view[0] is not None else None
            shadow.step([restored(f) for f in found], current, now)
            if why is not None:
                degraded.append(why)
            steps[0] += 1
            last_t[0] = now
        spent[0] += time.perf_counter() - t0
        if on_episodes is not None:
            on_episodes(so_far)

    def tick(done: int) -> None:  # steps counted by every worker, so progress only grows
        if progress is not None:
            progress(done, start + done * step)

    try:
        run = replay_sharded(
            PrometheusFrames(settings), suite, start, end, step, k, k, None, grace_cycles,
            decide, tick, CycleNotes(),
        )  # fmt: skip
        reasons = tuple(dict.fromkeys(degraded))[:3]
        replay = ReplayRun((run.result,), steps[0], len(degraded), reasons, run.seconds, last_t[0])
        return Backtest(replay, tuple(shadow.decisions), spent[0])
    finally:
        shadow.close()
