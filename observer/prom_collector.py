"""The Prometheus collector: PromQL over prometheus-api-client -> one FleetSnapshot per cycle.

The only module that imports prometheus_api_client (import-linter contract). It owns the HTTP
side — `PrometheusConnect` with a urllib3 `Retry` (backoff, Retry-After, connection errors, read
timeouts, 429/5xx), a per-request timeout also sent to Prometheus as the query `timeout`, and a
response hook that records bytes, `warnings` and `resultType`, which `custom_query` drops. The
PromQL is in observer.prom_queries, the parsing in observer.prom_parse / prom_assemble.

    collector = PrometheusCollector(PromSettings(url="http://prometheus:9090"))
    result = collector.collect(at=t)              # one instant cycle (at=None: now)
    for result in collector.collect_range(t0, t1, step=30):   # chunked range queries
        detect(result.snapshot, ...)

Failure behaviour: Prometheus unreachable, or the essential `identity` query failing, raises
CollectionError (temporary or permanent; no snapshot). Any other query failing, timing out,
answering with warnings or an unexpected `resultType` yields a snapshot marked degraded
(`TelemetryHealth.source_ok` False, `degraded_reason` naming the queries and why).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from observer.collect_errors import CollectionError, CycleStats, QueryStat
from observer.job_identity import JobIdentity
from observer.model import Event, FleetSnapshot, Node, Pod
from observer.prom_assemble import assemble
from observer.prom_memory import PromMemory
from observer.prom_queries import PromSettings, Query, plan
from observer.prom_range import chunks, split_matrix
from observer.snapshot_builder import BuildReport, SnapshotBuilder

log = logging.getLogger(__name__)
RETRY_STATUS = (429, 500, 502, 503, 504)
_RESULT_TYPE = re.compile(rb'"resultType"\s*:\s*"(\w+)"')


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
class _Seen:
    status: int = 0
    bytes_wire: int = 0
    bytes_body: int = 0
    result_type: str = ""
    warnings: tuple[str, ...] = ()
    error: str = ""


class PrometheusApi:
    """prometheus-api-client with our retries, timeouts and response accounting."""

    def __init__(self, s: PromSettings) -> None:
        self.settings = s
        retry = Retry(
            total=s.retries,
            connect=s.retries,
            read=s.retries,
            status=s.retries,
            backoff_factor=s.backoff,
            backoff_max=max(s.backoff * 8, 1.0),
            status_forcelist=RETRY_STATUS,
            allowed_methods=frozenset({"GET", "POST"}),
            respect_retry_after_header=True,
            raise_on_status=False,
        )
        self._session = requests.Session()
        self._session.hooks["response"].append(self._capture)
        self._local = threading.local()
        self._conn = PrometheusConnect(
            url=s.url.rstrip("/"),
            headers=dict(s.headers) or None,
            retry=retry,
            session=self._session,
            timeout=s.timeout,  # requests takes float seconds
        )

    def close(self) -> None:
        self._conn.close()

    def _capture(self, r: requests.Response, *args: Any, **kwargs: Any) -> None:
        body = r.content
        seen = _Seen(status=r.status_code, bytes_body=len(body))
        try:
            seen.bytes_wire = int(r.raw.tell())  # 0 when unknown (chunked transfer)
        except (AttributeError, OSError, TypeError):
            seen.bytes_wire = 0
        m = _RESULT_TYPE.search(body[:200])
        seen.result_type = m.group(1).decode() if m else ""
        if r.status_code != 200 or b'"warnings"' in body:
            try:
                doc = r.json()
                seen.warnings = tuple(str(w) for w in doc.get("warnings") or ())
                seen.error = f"{doc.get('errorType', '')}: {doc.get('error', '')}".strip(": ")
            except ValueError:
                seen.error = body[:200].decode(errors="replace")
        self._local.seen = seen

    def _call(self, fn: Callable[[], Any], expect: str) -> tuple[list[dict[str, Any]], _Seen]:
        self._local.seen = _Seen()
        try:
            result = fn()
        except PrometheusApiClientException as exc:
            seen: _Seen = self._local.seen
            temporary = seen.status in RETRY_STATUS or seen.status == 0
            raise QueryFailed(
                f"HTTP {seen.status}: {seen.error or exc}", temporary=temporary
            ) from None
        except requests.exceptions.ConnectionError as exc:
            text = str(exc)
            timed_out = "timed out" in text or "Read timed out" in text
            if timed_out:
                raise QueryFailed(
                    f"timed out after {self.settings.timeout:g} s", temporary=True
                ) from None
            raise QueryFailed(_short(text), temporary=True, unreachable=True) from None
        except requests.exceptions.Timeout:
            raise QueryFailed(
                f"timed out after {self.settings.timeout:g} s", temporary=True
            ) from None
        except requests.exceptions.RequestException as exc:
            raise QueryFailed(_short(str(exc)), temporary=True) from None
        except (KeyError, ValueError) as exc:  # a 200 that is not the API's JSON
            raise QueryFailed(f"malformed answer ({exc!r})", temporary=True) from None
        seen = self._local.seen
        if expect and seen.result_type != expect:
            raise QueryFailed(
                f"resultType {seen.result_type!r}, expected {expect!r}", temporary=False
            )
        if not isinstance(result, list):
            raise QueryFailed(f"unexpected result {type(result).__name__}", temporary=False)
        return result, seen

    def _params(self) -> dict[str, str]:
        return {"timeout": f"{max(1.0, self.settings.timeout):g}s"}

    def names(self, match: str, start: float, end: float) -> tuple[list[dict[str, Any]], _Seen]:
        """`__name__` values of the series matching `match` in [start, end] (index only)."""
        params = {"match[]": match, "start": f"{start:.3f}", "end": f"{end:.3f}"}
        return self._call(lambda: self._conn.get_label_values("__name__", params=params), "")

    def instant(self, promql: str, at: float) -> tuple[list[dict[str, Any]], _Seen]:
        params = {**self._params(), "time": f"{at:.3f}"}
        return self._call(lambda: self._conn.custom_query(promql, params=params), "vector")

    def range(
        self, promql: str, start: float, end: float, step: float
    ) -> tuple[list[dict[str, Any]], _Seen]:
        def call() -> Any:
            return self._conn.custom_query_range(
                promql,
                start_time=datetime.fromtimestamp(start, UTC),
                end_time=datetime.fromtimestamp(end, UTC),
                step=f"{step:g}",
                params=self._params(),
            )

        return self._call(call, "matrix")


def _short(text: str) -> str:
    m = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)|(Name or service not known)", text)
    return (next(g for g in m.groups() if g) if m else text[:160]).strip()


class PrometheusCollector:
    """Instant and range collection cycles against one Prometheus-compatible server."""

    def __init__(
        self,
        settings: PromSettings,
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
        self.api = PrometheusApi(settings)
        self._pool = ThreadPoolExecutor(max(1, settings.concurrency), "prom-query")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.api.close()

    def __enter__(self) -> PrometheusCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(
        self,
        ask: Callable[[Query], tuple[list[dict[str, Any]], _Seen]],
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
    ) -> tuple[FleetSnapshot, BuildReport]:
        if not cold:
            answers = {**answers, **self.memory.answers(answers.get("identity") or [], t)}
        result = assemble(
            answers, t, self.settings, problems, self.builder, nodes=nodes, pods=pods,
            events=events,
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
            for t, step_answers in split_matrix(chunk_answers, c0, c1, step):
                snap, report = self._assemble(step_answers, t, False, chunk_problems)
                cycle = CycleStats(tuple(stats), took, tuple(problems))
                yield CollectResult(snap, cycle, report)
            began = time.perf_counter()
            stats, problems = [], []
