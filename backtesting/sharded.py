"""Replay a long window on several cores: time shards, each warmed up on the time before it.

A replay is sequential by nature (each cycle's detector state comes from the one before), but
detector state is short-lived: persistence windows, holds, baselines and the anomaly forest's
schedule look back minutes to hours, never days. So a window is cut into `shards` consecutive
time chunks; a worker process replays each chunk from `warmup` seconds before its start (state
only, findings discarded), then the chunk itself, and sends back each cycle's findings. The
parent feeds them, in time order, to one episode tracker, exactly as a sequential replay does.

While the workers run, the parent wakes every `TICK` seconds to report the steps done so far
(a shared counter the workers add to), which is also when a caller can cancel: an exception
from a callback terminates the workers at once.

`warmup_seconds(suite)` is the longest memory any enabled detector declares: per detector, the
sum of its `*_seconds` parameters (the anomaly forest's refit period plus its persistence, a
straggler's limit, noise and jump windows, gpu_idle's idle time plus its warning delay, ...).
With that warm-up each shard's state has converged to the sequential replay's before its first
counted cycle; `tests/test_sharded_replay.py` holds the episodes byte-identical on the suite.
"""

from __future__ import annotations

import copyreg
import dataclasses
import math
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from backtesting.episodes import EpisodeTracker
from backtesting.replayer import ReplayResult
from detectors.findings import Finding
from detectors.suite import DetectorFailure, DetectorSuite, SuiteState
from observer.fleet.model import FleetSnapshot


def _mapping_proxy(items: dict[Any, Any]) -> MappingProxyType[Any, Any]:
    return MappingProxyType(items)


def _reduce_mapping_proxy(m: MappingProxyType[Any, Any]) -> tuple[Any, tuple[dict[Any, Any]]]:
    return _mapping_proxy, (dict(m),)


# A worker's results carry read-only mappings (cluster views' labels, findings' evidence):
# they cross the process boundary as a read-only copy of the same items.
copyreg.pickle(MappingProxyType, _reduce_mapping_proxy)

TICK = 0.25
"""Seconds between progress reports (and chances to cancel) while the shards run."""
ORPHAN_POLL = 0.5
"""Seconds between a worker's checks that the process that started it is still there."""
_done: Any = None
"""In a worker: the shared count of counted cycles replayed, for the parent's progress."""


class FrameSource(Protocol):
    """Snapshots at start, start + step, ... end (picklable: it is sent to a worker)."""

    def frames(
        self, start: float, end: float, step: float
    ) -> Iterable[tuple[float, FleetSnapshot]]: ...


@dataclass(frozen=True, slots=True)
class Shard:
    warm_from: float
    """First step replayed (to build state; its findings are not counted)."""
    start: float
    """First step whose findings count."""
    end: float
    """Last step whose findings count."""


@dataclass(frozen=True, slots=True)
class ShardOutput:
    shard: Shard
    cycles: tuple[tuple[float, tuple[Finding, ...]], ...]
    """Each counted cycle's findings (evidence as plain dicts, so that they pickle)."""
    failures: tuple[DetectorFailure, ...]
    detector_seconds: float
    replayed: int
    """Cycles replayed, warm-up included."""
    notes: tuple[object, ...] = ()
    """What `notes(snapshot)` said at each counted cycle, when asked (else empty)."""


def warmup_seconds(suite: DetectorSuite) -> float:
    """The longest state memory of any detector of `suite` (module docstring)."""
    longest = 0.0
    for det in suite.detectors:
        params = det.params
        if not dataclasses.is_dataclass(params):
            continue
        total = sum(
            float(getattr(params, f.name))
            for f in dataclasses.fields(params)
            if f.name.endswith("seconds") and isinstance(getattr(params, f.name), int | float)
        )
        longest = max(longest, total)
    return longest


def plan(start: float, end: float, step: float, shards: int, warmup: float) -> tuple[Shard, ...]:
    """`shards` chunks of whole steps covering start..end, each warmed up `warmup` seconds
    (whole steps, never before `start`)."""
    steps = int((end - start) // step) + 1 if end >= start else 0
    if steps == 0:
        return ()
    per = math.ceil(steps / max(1, min(shards, steps)))
    back = math.ceil(warmup / step)
    out = []
    for first in range(0, steps, per):
        last = min(steps, first + per) - 1
        out.append(
            Shard(start + max(0, first - back) * step, start + first * step, start + last * step)
        )
    return tuple(out)


def _portable(f: Finding) -> Finding:
    return dataclasses.replace(f, evidence=dict(f.evidence))


def restored(f: Finding) -> Finding:
    """A finding back from a worker, its evidence read-only again as the suite returns it."""
    return dataclasses.replace(f, evidence=MappingProxyType(dict(f.evidence)))


def _init_worker(done: Any, parent: int) -> None:
    global _done
    _done = done
    threading.Thread(
        target=_exit_when_orphaned, args=(parent,), name="orphan-watch", daemon=True
    ).start()


def _exit_when_orphaned(parent: int) -> None:
    """A worker whose parent is gone (kill -9 of `gpufleet backtest`, an OOM-killed dashboard)
    would otherwise replay its whole shard for nobody, on a core the operator wants back:
    poll the parent id (re-parenting changes it) and leave once it is not `parent`, the pid
    the parent gave (not our first getppid: a parent killed while this worker still imported
    its modules would make init the parent we watch). Polling,
    not PR_SET_PDEATHSIG: that signal follows the thread that forked, and a pool also
    starts workers from its own handler thread and from whichever thread called the replay."""
    while os.getppid() == parent:
        time.sleep(ORPHAN_POLL)
    os._exit(1)


def replay_shard(
    source: FrameSource,
    suite: DetectorSuite,
    shard: Shard,
    step: float,
    notes: Callable[[FleetSnapshot], object] | None = None,
) -> ShardOutput:
    """One shard, in this process: warm up, then record each counted cycle's findings (and
    what `notes`, a picklable callable, says of its snapshot)."""
    state = SuiteState()
    noted: list[object] = []
    cycles: list[tuple[float, tuple[Finding, ...]]] = []
    failures: list[DetectorFailure] = []
    seconds = 0.0
    replayed = 0
    for now, snap in source.frames(shard.warm_from, shard.end, step):
        res = suite.run(snap, now, state)
        state = res.state
        replayed += 1
        if now >= shard.start:
            cycles.append((now, tuple(_portable(f) for f in res.findings)))
            failures.extend(res.failures)
            seconds += sum(res.seconds.values())
            if notes is not None:
                noted.append(notes(snap))
            if _done is not None:
                with _done.get_lock():
                    _done.value += 1
    return ShardOutput(shard, tuple(cycles), tuple(failures), seconds, replayed, tuple(noted))


@dataclass(frozen=True, slots=True)
class ShardedRun:
    result: ReplayResult
    """Episodes as a sequential replay finds them; `state` is empty (it stays in the workers)."""
    shards: tuple[Shard, ...]
    replayed: int
    """Cycles replayed over all shards, warm-ups included."""
    seconds: float


def merge(outputs: Iterable[ShardOutput], grace_cycles: int = 0) -> Iterator[list[Finding]]:
    """Feed shard outputs (in time order) to one tracker; yields the episodes found so far
    after each shard (the last yield is every episode, open ones finished)."""
    tracker = EpisodeTracker(grace_cycles=grace_cycles)
    for out in outputs:
        for now, found in out.cycles:
            tracker.observe(now, [restored(f) for f in found])
        yield [*tracker.closed, *tracker.active()]
    yield tracker.finish()


def replay_sharded(
    source: FrameSource,
    suite: DetectorSuite,
    start: float,
    end: float,
    step: float,
    shards: int = 2,
    workers: int | None = None,
    warmup: float | None = None,
    grace_cycles: int = 0,
    on_shard: Callable[[ShardOutput, list[Finding]], None] | None = None,
    on_tick: Callable[[int], None] | None = None,
    notes: Callable[[FleetSnapshot], object] | None = None,
) -> ShardedRun:
    """Replay start..end in `shards` time chunks on `workers` processes (default: as many as
    shards, at most the CPUs); `on_shard(output, episodes so far)` after each chunk in order,
    `on_tick(counted steps done)` every TICK seconds while waiting; `notes` as replay_shard's.
    An exception from a callback (a cancelled run) terminates the workers and propagates."""
    began = time.perf_counter()
    chunks = plan(start, end, step, shards, warmup_seconds(suite) if warmup is None else warmup)
    n_workers = max(1, min(len(chunks), workers or multiprocessing.cpu_count()))
    outputs: list[ShardOutput] = []
    episodes: list[Finding] = []
    ctx = multiprocessing.get_context("spawn")
    done = ctx.Value("q", 0)
    pool = ctx.Pool(n_workers, initializer=_init_worker, initargs=(done, os.getpid()))

    def results() -> Iterator[ShardOutput]:
        for p in pending:
            while not p.ready():
                p.wait(TICK)
                if on_tick is not None:
                    on_tick(int(done.value))
            yield p.get()

    try:
        pending = [pool.apply_async(replay_shard, (source, suite, c, step, notes)) for c in chunks]
        for i, episodes in enumerate(merge(results(), grace_cycles)):
            if i < len(pending):
                outputs.append(pending[i].get())
                if on_shard is not None:
                    on_shard(outputs[-1], episodes)
    except BaseException:
        pool.terminate()  # a cancelled or failed replay stops every worker now
        raise
    else:
        pool.close()
    finally:
        pool.join()
    failures = tuple(x for o in outputs for x in o.failures)
    cycles = sum(len(o.cycles) for o in outputs)
    result = ReplayResult(
        tuple(episodes), failures, cycles, sum(o.detector_seconds for o in outputs), SuiteState()
    )
    return ShardedRun(result, chunks, sum(o.replayed for o in outputs), time.perf_counter() - began)
