"""The Prometheus collector: PromQL over prometheus-api-client -> one FleetSnapshot per cycle.

The only module that imports prometheus_api_client (import-linter contract). It owns the HTTP
side — `PrometheusConnect` with a urllib3 `Retry` (backoff, Retry-After, connection errors, read
timeouts, 429/5xx), a per-request timeout also sent to Prometheus as the query `timeout`, and a
response hook that records bytes, `warnings` and `resultType`, which `custom_query` drops. The
PromQL is in observer.prometheus.plan, the cycle in observer.prometheus.cycle, the parsing in
observer.prometheus.parse / prom_assemble.

    collector = PrometheusCollector(PromSettings(url="http://prometheus:9090"))
    result = collector.collect(at=t)              # one instant cycle (at=None: now)
    for result in collector.collect_range(t0, t1, step=30):   # chunked range queries
        detect(result.snapshot, ...)

Failure behaviour: Prometheus unreachable, or the essential `identity` query failing, raises
errors.TemporaryError or PermanentError (no snapshot). Any other query failing, timing out,
answering with warnings or an unexpected `resultType` yields a snapshot marked degraded
(`TelemetryHealth.source_ok` False, `degraded_reason` naming the queries and why).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from observer.prometheus.answers import PARTIAL_WARNING, flagged_partial
from observer.prometheus.cycle import Answer, CollectResult, PromCycles, QueryFailed, Seen
from observer.prometheus.plan import PromSettings
from observer.snapshot.builder import SnapshotBuilder

RETRY_STATUS = (429, 500, 502, 503, 504)
_RESULT_TYPE = re.compile(rb'"resultType"\s*:\s*"(\w+)"')
__all__ = ["CollectResult", "PrometheusApi", "PrometheusCollector", "QueryFailed"]


class _OrjsonResponse(requests.Response):
    """A response whose `.json()` decodes with orjson: prometheus-api-client calls `.json()` on
    every answer, and a 10k-GPU cycle's ~28 MB of JSON took the stdlib decoder ~0.45 CPU s,
    orjson ~0.3 (both with GC paused; measured on the development machine)."""

    def json(self, **kwargs: Any) -> Any:
        return orjson.loads(self.content)


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
        if not s.compress:  # requests asks for gzip by default; see PromSettings.compress
            self._session.headers["Accept-Encoding"] = "identity"
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
        r.__class__ = _OrjsonResponse  # same layout; only `.json()` differs
        body = r.content
        seen = Seen(status=r.status_code, bytes_body=len(body))
        try:
            seen.bytes_wire = int(r.raw.tell())  # 0 when unknown (chunked transfer)
        except (AttributeError, OSError, TypeError):
            seen.bytes_wire = 0
        m = _RESULT_TYPE.search(body[:200])
        seen.result_type = m.group(1).decode() if m else ""
        if r.status_code != 200 or b'"warnings"' in body or flagged_partial(body):
            try:
                doc = r.json()
                seen.warnings = tuple(str(w) for w in doc.get("warnings") or ())
                if doc.get("isPartial") is True:
                    seen.warnings += (PARTIAL_WARNING,)
                seen.error = f"{doc.get('errorType', '')}: {doc.get('error', '')}".strip(": ")
            except ValueError:
                seen.error = body[:200].decode(errors="replace")
        self._local.seen = seen

    def _call(self, fn: Callable[[], Any], expect: str) -> Answer:
        self._local.seen = Seen()
        try:
            result = fn()
        except PrometheusApiClientException as exc:
            seen: Seen = self._local.seen
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

    def names(self, match: str, start: float, end: float) -> Answer:
        """`__name__` values of the series matching `match` in [start, end] (index only)."""
        params = {"match[]": match, "start": f"{start:.3f}", "end": f"{end:.3f}"}
        return self._call(lambda: self._conn.get_label_values("__name__", params=params), "")

    def instant(self, promql: str, at: float, expect: str = "vector") -> Answer:
        """An instant query; `expect="matrix"` for a range selector (raw samples, `x[1h]`)."""
        params = {**self._params(), "time": f"{at:.3f}"}
        return self._call(lambda: self._conn.custom_query(promql, params=params), expect)

    def range(self, promql: str, start: float, end: float, step: float) -> Answer:
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


class PrometheusCollector(PromCycles):
    """Instant and range collection cycles against one Prometheus-compatible server."""

    def __init__(
        self,
        settings: PromSettings,
        *,
        now: Callable[[], float] = time.time,
        builder: SnapshotBuilder | None = None,
    ) -> None:
        super().__init__(settings, PrometheusApi(settings), now=now, builder=builder)
