"""Prometheus collection cycles: run the plan's queries concurrently, judge the answers, build.

The orchestration behind observer.prometheus.collector.PrometheusCollector, kept apart from the HTTP
adapter (the only module that may import prometheus_api_client) so that adapter stays thin.
A cycle runs the plan's queries on a thread pool (the essential `identity` first in line: when
it fails, or Prometheus is unreachable, the cycle stops with errors.TemporaryError or
PermanentError and no snapshot);
any other failed, timed-out, warned or mistyped answer marks the snapshot degraded with the
reason. Cycles in time order reuse what earlier ones saw (observer.prometheus.memory); range replays
read each chunk's raw samples once and evaluate every step locally
(observer.prometheus.replay.range_replay), with the
instant cycle's rules, so that a replayed step equals the instant cycle at that time.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, Self, TypeVar

from errors import PermanentError, TemporaryError
from observer.fleet.model import Event, FleetSnapshot, Node, Pod
from observer.prometheus.answers import QueryFailed, Seen
from observer.prometheus.assemble import assemble, drop_partial
from observer.prometheus.counter_memory import CounterMemory
from observer.prometheus.memory import PromMemory
from observer.prometheus.plan import PromSettings, Query, counter_families, plan
from observer.prometheus.replay.chunks import chunks
from observer.prometheus.replay.fetch import RawFetch
from observer.prometheus.replay.range_replay import RawQuery, RawReplay, memory_from
from observer.prometheus.replay.steps import KubeCache, build_step
from observer.promql import DEFAULT_LOOKBACK, LEFT_OPEN_PROBE, parse_duration
from observer.snapshot.builder import BuildReport, SnapshotBuilder
from observer.snapshot.cycle_stats import CycleStats, QueryStat
from observer.snapshot.gc_pause import paused_gc
from observer.snapshot.job_identity import JobIdentity

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CollectResult:
    snapshot: FleetSnapshot
    stats: CycleStats
    report: BuildReport


__all__ = ["Answer", "CollectResult", "PromCycles", "QueryApi", "QueryFailed", "Seen"]
R = TypeVar("R", bound=Sized)
Q = TypeVar("Q", Query, RawQuery)
Answer = tuple[list[Any], Seen]


class QueryApi(Protocol):
    """What a cycle needs from the HTTP side (observer.prometheus.collector.PrometheusApi)."""

    def instant(self, promql: str, at: float, expect: str = "vector") -> Answer: ...

    def range(self, promql: str, start: float, end: float, step: float) -> Answer: ...

    def names(self, match: str, start: float, end: float) -> Answer: ...

    def close(self) -> None: ...


class PromCycles:
    """Instant and range collection cycles over a `QueryApi` (observer.prometheus.collector's)."""

    def __init__(
        self,
        settings: PromSettings,
        api: QueryApi,
        *,
        now: Callable[[], float] = time.time,
        builder: SnapshotBuilder | None = None,
        lookback: float | None = None,
    ) -> None:
        self.settings = settings
        self.lookback = lookback
        """Prometheus' `--query.lookback-delta` in seconds, for range replays (None: ask the
        server's flags; 5 minutes when it does not say)."""
        self.range_seconds: dict[str, float] = {}
        """Where the last range replay's collection time went: setup (cold queries, probes,
        workers), wait (for samples not yet fetched), grids (per chunk), steps (per snapshot),
        and how many chunks it read."""
        self.now = now
        self.builder = (
            builder
            or SnapshotBuilder(
                JobIdentity(tuple(settings.job_label_keys)), settings.cluster
            ).with_pod_cache()
        )
        self.queries: tuple[Query, ...] = plan(settings)
        self.warm_queries = tuple(q for q in self.queries if not q.cold)
        self.memory = PromMemory(settings.inventory_window)
        self.counters = counter_memory(settings)
        self.api = api
        self._pool = ThreadPoolExecutor(max(1, settings.concurrency), "prom-query")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.api.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(
        self,
        ask: Callable[[Q], tuple[R, Seen]],
        queries: Sequence[Q],
    ) -> tuple[dict[str, R | None], list[QueryStat], list[str]]:
        def one(q: Q) -> tuple[Q, R | None, QueryStat, QueryFailed | None]:
            t0 = time.perf_counter()
            try:
                result, seen = ask(q)
            except QueryFailed as exc:
                dt = time.perf_counter() - t0
                return q, None, QueryStat(q.name, dt, 0, 0, 0, False, str(exc)), exc
            dt = time.perf_counter() - t0
            problem = "warnings: " + " | ".join(seen.warnings) if seen.warnings else ""
            stat = QueryStat(
                q.name, dt, seen.bytes_wire, seen.bytes_body, len(result), True, problem
            )
            return q, result, stat, None

        answers: dict[str, R | None] = {}
        stats: list[QueryStat] = []
        problems: list[str] = []
        failures: list[tuple[Q, QueryFailed]] = []
        futures = [self._pool.submit(one, q) for q in queries]
        for fut in futures:  # the essential query is first: when it fails, stop right there
            q, result, stat, exc = fut.result()
            if exc is not None and (q.essential or exc.unreachable):
                for other in futures:
                    other.cancel()
                self._raise_if_fatal([(q, exc)])
            answers[q.name] = result
            stats.append(stat)
            if exc is not None:
                failures.append((q, exc))
                problems.append(f"query {q.name} failed: {exc}")
            elif stat.problem:
                problems.append(f"query {q.name}: {stat.problem}")
        self._raise_if_fatal(failures)
        for p in problems:
            log.warning("prometheus %s: %s", self.settings.url, p)
        return answers, stats, problems

    def _raise_if_fatal(self, failures: Sequence[tuple[Query | RawQuery, QueryFailed]]) -> None:
        url = self.settings.url
        for _q, exc in failures:
            if exc.unreachable:
                raise TemporaryError(
                    f"Prometheus at {url} is unreachable: {exc}",
                    source=url,
                    hint="check --prometheus-url and that Prometheus is running",
                )
        for q, exc in failures:
            if q.essential:
                raise (TemporaryError if exc.temporary else PermanentError)(
                    f"Prometheus at {url} did not answer the GPU inventory query: {exc}",
                    source=url,
                    hint="retry later"
                    if exc.temporary
                    else "check the URL, credentials and that it serves the Prometheus HTTP API",
                )

    def collect(
        self,
        at: float | None = None,
        *,
        nodes: Sequence[Node] | None = None,
        pods: Sequence[Pod] | None = None,
        events: Iterable[Event] = (),
    ) -> CollectResult:
        """One instant cycle at `at` (default: now). Kubernetes records, if given, replace
        kube-state-metrics' (the Kubernetes collector is fresher). Cycles in time order reuse
        what earlier ones saw (observer.prometheus.memory, observer.prometheus.counter_memory); a
        cold start asks
        10 more queries. Cyclic GC is paused while the answers are decoded and assembled
        (observer.snapshot.gc_pause says why)."""
        t = self.now() if at is None else float(at)
        began = time.perf_counter()
        cold = not (self.memory.warm(t) and self.counters.warm(t))
        with paused_gc():
            answers, stats, problems = self._run(
                lambda q: self._ask_instant(q, t), self.queries if cold else self.warm_queries
            )
            answers = drop_partial(answers, stats)
            snap, report = self._assemble(answers, t, cold, problems, nodes, pods, events)
        took = time.perf_counter() - began
        return CollectResult(snap, CycleStats(tuple(stats), took, tuple(problems)), report)

    def _ask_instant(self, q: Query, t: float) -> tuple[Any, Any]:
        if q.kind == "names":
            return self.api.names(q.promql, t - self.settings.names_lookback, t)
        return self.api.instant(q.promql, t)

    def _assemble(
        self,
        answers: dict[str, list[dict[str, Any]] | None],
        t: float,
        cold: bool,
        problems: Sequence[str],
        nodes: Sequence[Node] | None = None,
        pods: Sequence[Pod] | None = None,
        events: Iterable[Event] = (),
    ) -> tuple[FleetSnapshot, BuildReport]:
        if not cold:
            answers = {**answers, **self.memory.answers(answers.get("identity") or [], t)}
        result = assemble(
            answers, t, self.settings, problems, self.builder, nodes=nodes, pods=pods,
            events=events, counters=self.counters, cold=cold,
        )  # fmt: skip
        self.memory.remember(answers, t, cold)
        self.counters.compact(t)
        return result

    def collect_range(self, start: float, end: float, step: float) -> Iterator[CollectResult]:
        """Snapshots at start, start+step, ... end, equal to instant cycles at those times
        (observer.prometheus.replay.range_replay): the cold-start queries once, as instant queries
        at `start`, then
        per chunk of `settings.range_chunk` the raw samples, every step evaluated locally."""
        began = time.perf_counter()
        spent = self.range_seconds = dict.fromkeys(("setup", "wait", "grids", "steps"), 0.0)
        spent["chunks"] = 0
        cold_queries = [q for q in self.queries if (q.cold and not q.family) or q.essential]
        answers, stats, problems = self._run(lambda q: self._ask_instant(q, start), cold_queries)
        self.memory = PromMemory(self.settings.inventory_window)
        self.memory.remember(answers, start, cold=True)
        memory = memory_from(self.memory, counter_memory(self.settings))
        fetch = RawFetch(self.settings)
        replay = RawReplay(
            self.settings, fetch, self._run,
            lambda a, b: self.api.names(_dcgm_names(self.queries), a, b)[0],
            *self._server_semantics(fetch, start),
            workers=2 if end - start > self.settings.range_chunk else 0,  # short: not worth it
        )  # fmt: skip
        builder = self.builder.with_pod_cache()
        spent["setup"] = time.perf_counter() - began
        try:
            span = chunk_span(self.settings.range_chunk, step, len(self.memory.gpus),
                              self.memory.interval)  # fmt: skip
            fetches = replay.chunks(list(chunks(start, end, step, span, first_span=span / 6)))
            while True:
                t0 = time.perf_counter()
                fetched = next(fetches, None)
                if fetched is None:
                    break
                t1 = time.perf_counter()
                chunk = replay.grids(fetched, step, memory)
                spent["wait"] += t1 - t0
                spent["chunks"] += 1
                spent["grids"] += time.perf_counter() - t1
                stats += fetched.stats
                problems += fetched.problems
                took = time.perf_counter() - began
                cache = KubeCache()
                cycle = CycleStats(tuple(stats), took, tuple(problems))
                for k in range(int(chunk.timing.steps_ms.shape[0])):
                    t2 = time.perf_counter()
                    snap, report = build_step(chunk, k, self.settings, builder, cache)
                    spent["steps"] += time.perf_counter() - t2
                    yield CollectResult(snap, cycle, report)
                began = time.perf_counter()
                stats, problems = [], []
        finally:
            replay.close()
            fetch.close()
            self.counters = memory.counters  # instant cycles after the replay go on from it

    def _server_semantics(self, fetch: RawFetch, at: float) -> tuple[float, bool]:
        """(lookback delta in seconds, windows left-open?) of the server."""
        lookback = self.lookback
        if lookback is None:
            lookback = parse_duration(fetch.flags().get("query.lookback-delta", ""))
        left_open = False
        try:
            probe, _ = self.api.instant(LEFT_OPEN_PROBE, 30.0 * math.floor(at / 30.0))
            left_open = bool(probe) and float(probe[0]["value"][1]) < 3
        except (QueryFailed, KeyError, IndexError, ValueError):
            log.warning("prometheus %s: window probe failed; assuming closed windows (2.x)",
                        self.settings.url)  # fmt: skip
        return (lookback if lookback else DEFAULT_LOOKBACK), left_open


MAX_CHUNK_SAMPLES = 4_000_000
"""Raw samples one chunk may hold (~16 bytes each, and grids of similar size): about 1 h of
1k GPUs at 30 s; larger fleets get shorter chunks, so a replay's memory stays bounded."""
SERIES_PER_GPU = 25


def chunk_span(longest: float, step: float, gpus: int, interval: float | None) -> float:
    """Seconds per replay chunk: `longest`, or less when the fleet would exceed
    MAX_CHUNK_SAMPLES in that time (estimated from its GPUs and scrape interval)."""
    per_second = max(1, gpus) * SERIES_PER_GPU / (interval if interval and interval > 0 else 30.0)
    return max(step, min(longest, MAX_CHUNK_SAMPLES / per_second))


def counter_memory(s: PromSettings) -> CounterMemory:
    """Memory of counter totals for increases over `s.window`, kept as long as PromMemory
    keeps a GPU (the inventory window)."""
    return CounterMemory(counter_families(), s.window, s.inventory_window)


def _dcgm_names(queries: Sequence[Query]) -> str:
    return next((q.promql for q in queries if q.kind == "names"), '{__name__=~"DCGM_.+"}')
