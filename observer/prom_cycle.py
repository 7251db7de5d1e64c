"""Prometheus collection cycles: run the plan's queries concurrently, judge the answers, build.

The orchestration behind observer.prom_collector.PrometheusCollector, kept apart from the HTTP
adapter (the only module that may import prometheus_api_client) so that adapter stays thin.
A cycle runs the plan's queries on a thread pool (the essential `identity` first in line: when
it fails, or Prometheus is unreachable, the cycle stops with CollectionError and no snapshot);
any other failed, timed-out, warned or mistyped answer marks the snapshot degraded with the
reason. Cycles in time order reuse what earlier ones saw (observer.prom_memory); range replays
run the same queries as chunked range queries and assemble each step like an instant cycle.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, Self

from observer.collect_errors import CollectionError, CycleStats, QueryStat
from observer.job_identity import JobIdentity
from observer.model import Event, FleetSnapshot, Node, Pod
from observer.prom_assemble import assemble
from observer.prom_memory import PromMemory
from observer.prom_parse import Columns
from observer.prom_queries import PromSettings, Query, plan
from observer.prom_range import ValueMatrix, chunks, split_matrix
from observer.snapshot_builder import BuildReport, SnapshotBuilder

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CollectResult:
    snapshot: FleetSnapshot
    stats: CycleStats
    report: BuildReport


class QueryFailed(Exception):
    def __init__(self, message: str, *, temporary: bool, unreachable: bool = False) -> None:
        super().__init__(message)
        self.temporary = temporary
        self.unreachable = unreachable


@dataclass(slots=True)
class Seen:
    status: int = 0
    bytes_wire: int = 0
    bytes_body: int = 0
    result_type: str = ""
    warnings: tuple[str, ...] = ()
    error: str = ""


Answer = tuple[list[Any], Seen]


class QueryApi(Protocol):
    """What a cycle needs from the HTTP side (observer.prom_collector.PrometheusApi)."""

    def instant(self, promql: str, at: float, expect: str = "vector") -> Answer: ...

    def range(self, promql: str, start: float, end: float, step: float) -> Answer: ...

    def names(self, match: str, start: float, end: float) -> Answer: ...

    def close(self) -> None: ...


class PromCycles:
    """Instant and range collection cycles over a `QueryApi` (observer.prom_collector's)."""

    def __init__(
        self,
        settings: PromSettings,
        api: QueryApi,
        *,
        now: Callable[[], float] = time.time,
        builder: SnapshotBuilder | None = None,
    ) -> None:
        self.settings = settings
        self.now = now
        self.builder = builder or SnapshotBuilder(
            JobIdentity(tuple(settings.job_label_keys)), settings.cluster
        )
        self.queries: tuple[Query, ...] = plan(settings)
        self.warm_queries = tuple(q for q in self.queries if not q.cold)
        self.memory = PromMemory(settings.inventory_window)
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
        ask: Callable[[Query], Answer],
        queries: Sequence[Query],
    ) -> tuple[dict[str, list[dict[str, Any]] | None], list[QueryStat], list[str]]:
        def one(
            q: Query,
        ) -> tuple[Query, list[dict[str, Any]] | None, QueryStat, QueryFailed | None]:
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

        answers: dict[str, list[dict[str, Any]] | None] = {}
        stats: list[QueryStat] = []
        problems: list[str] = []
        failures: list[tuple[Query, QueryFailed]] = []
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

    def _raise_if_fatal(self, failures: Sequence[tuple[Query, QueryFailed]]) -> None:
        url = self.settings.url
        for _q, exc in failures:
            if exc.unreachable:
                raise CollectionError(
                    f"Prometheus at {url} is unreachable: {exc}",
                    temporary=True,
                    source=url,
                    hint="check --prometheus-url and that Prometheus is running",
                )
        for q, exc in failures:
            if q.essential:
                raise CollectionError(
                    f"Prometheus at {url} did not answer the GPU inventory query: {exc}",
                    temporary=exc.temporary,
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
        what earlier ones saw (observer.prom_memory); a cold start asks 3 more queries."""
        t = self.now() if at is None else float(at)
        began = time.perf_counter()
        cold = not self.memory.warm(t)
        answers, stats, problems = self._run(
            lambda q: self._ask_instant(q, t), self.queries if cold else self.warm_queries
        )
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
        value_columns: Callable[[Mapping[str, str] | None], Mapping[str, Columns]] | None = None,
    ) -> tuple[FleetSnapshot, BuildReport]:
        if not cold:
            answers = {**answers, **self.memory.answers(answers.get("identity") or [], t)}
        result = assemble(
            answers, t, self.settings, problems, self.builder, nodes=nodes, pods=pods,
            events=events, value_columns=value_columns,
        )  # fmt: skip
        self.memory.remember(answers, t, cold)
        return result

    def collect_range(self, start: float, end: float, step: float) -> Iterator[CollectResult]:
        """Snapshots at start, start+step, ... end, from range queries chunked to
        `settings.range_chunk`: the instant cycle's queries evaluated per step (the cold-start
        ones once, as instant queries at `start`), assembled step by step in time order."""
        began = time.perf_counter()
        cold_queries = [q for q in self.queries if q.cold or q.essential]
        answers, stats, problems = self._run(lambda q: self._ask_instant(q, start), cold_queries)
        self.memory = PromMemory(self.settings.inventory_window)
        self.memory.remember(answers, start, cold=True)
        for c0, c1 in chunks(start, end, step, self.settings.range_chunk):

            def ask(q: Query, c0: float = c0, c1: float = c1) -> tuple[Any, Any]:
                if q.kind == "names":
                    return self.api.names(q.promql, c0 - self.settings.names_lookback, c1)
                return self.api.range(q.promql, c0, c1, step)

            chunk_answers, chunk_stats, chunk_problems = self._run(ask, self.warm_queries)
            stats += chunk_stats
            problems += chunk_problems
            took = time.perf_counter() - began
            per_step = split_matrix(chunk_answers, c0, c1, step)
            matrices = [a for k, a in chunk_answers.items() if k.startswith("values:") and a]
            values = ValueMatrix(matrices, c0, step, len(per_step))
            for k, (t, step_answers) in enumerate(per_step):
                snap, report = self._assemble(
                    step_answers, t, False, chunk_problems,
                    value_columns=partial(values.columns, k),
                )  # fmt: skip
                cycle = CycleStats(tuple(stats), took, tuple(problems))
                yield CollectResult(snap, cycle, report)
            began = time.perf_counter()
            stats, problems = [], []
