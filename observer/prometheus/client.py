"""The one Prometheus HTTP client: one session, one retry policy, one error mapping.

The only module that imports prometheus_api_client or talks HTTP to Prometheus (import-linter
contract). Instant cycles ask it for decoded answers (`instant`, `range`, `names`, through
`PrometheusConnect`); range replays ask it for the raw bytes of a range selector (`raw`), which
observer.prometheus.replay.matrix parses into arrays far faster than any JSON decoder would.
Both go through the same `requests` session, so they share:

- the retry policy (`retry_policy`): urllib3 retries on connection errors, read timeouts, 429
  and 5xx, with backoff and Retry-After honoured;
- a per-request timeout, also sent to Prometheus as the query `timeout`;
- a response hook recording bytes, `warnings`, VictoriaMetrics' `isPartial` and `resultType`
  (which `custom_query` drops) in a `Seen`;
- the errors, from the errors/ vocabulary: `PrometheusUnreachable` (connection refused, DNS) and
  `QueryTemporary` (timed out, 429/5xx, a garbled answer) are `TemporaryError`s carrying their
  retry delay; `QueryRejected` (4xx, an answer of the wrong type) is a `PermanentError`. All are
  `QueryFailed`, which is what a cycle catches.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from errors import DEFAULT_DELAY, GpufleetError, PermanentError, TemporaryError
from observer.prometheus.credentials import FileSecret, PromAuth, SecretUnreadable
from observer.prometheus.plan import PromSettings

RETRY_STATUS = (429, 500, 502, 503, 504)
PARTIAL_WARNING = "partial response (isPartial: true): some storage nodes did not answer"
"""VictoriaMetrics cluster flags partial answers with `isPartial` instead of `warnings`; both
make the answer partial (the cycle degraded, its sparse counters unknown, never zero)."""
_PARTIAL = re.compile(rb'"isPartial"\s*:\s*true')
_RESULT_TYPE = re.compile(rb'"resultType"\s*:\s*"(\w+)"')


class QueryFailed(GpufleetError):
    """A Prometheus request failed; `temporary` says whether trying again may help."""


class QueryTemporary(QueryFailed, TemporaryError):
    """Timed out, overloaded (429/5xx) or a garbled answer: try again after `delay`."""


class PrometheusUnreachable(QueryTemporary):
    """No connection at all (refused, unknown host): the whole cycle stops."""


class QueryRejected(QueryFailed, PermanentError):
    """Prometheus refused the query (4xx) or answered something else than asked for."""


def flagged_partial(body: bytes) -> bool:
    """True when an answer body carries VictoriaMetrics' `"isPartial": true`."""
    return b'"isPartial"' in body and _PARTIAL.search(body) is not None


@dataclass(slots=True)
class Seen:
    """What one answer held, besides its result."""

    status: int = 0
    bytes_wire: int = 0
    bytes_body: int = 0
    result_type: str = ""
    warnings: tuple[str, ...] = ()
    error: str = ""
    retry_after: float | None = None


Answer = tuple[list[Any], Seen]


def retry_policy(s: PromSettings) -> Retry:
    """The one retry policy of every request to Prometheus."""
    return Retry(
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


class CredentialsUnreadable(QueryRejected):
    """The bearer token or password file could not be read: nothing was sent."""


class _Credentials(requests.auth.AuthBase):
    """The Authorization header of every request, from files read again when they rotate."""

    def __init__(self, a: PromAuth) -> None:
        self.token = FileSecret(a.bearer_token_file) if a.bearer_token_file else None
        self.username = a.username
        self.password = a.password
        self.password_file = FileSecret(a.password_file) if a.password_file else None

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        try:
            if self.token is not None:
                r.headers["Authorization"] = f"Bearer {self.token.value()}"
            elif self.username:
                pw = self.password_file.value() if self.password_file else self.password
                return requests.auth.HTTPBasicAuth(self.username, pw)(r)
        except SecretUnreadable as exc:
            raise CredentialsUnreadable(
                str(exc), hint="check the credentials file the source config names"
            ) from None
        return r


def apply_auth(session: requests.Session, a: PromAuth) -> _Credentials | None:
    """Credentials and TLS settings of `a` on `session` (None: no Authorization header)."""
    if a.insecure_skip_verify:
        session.verify = False
    elif a.ca_file:
        session.verify = a.ca_file
    if a.cert_file:
        session.cert = (a.cert_file, a.key_file) if a.key_file else a.cert_file
    if not (a.bearer_token_file or a.username):
        return None
    creds = _Credentials(a)
    session.auth = creds
    return creds


class _OrjsonResponse(requests.Response):
    """A response whose `.json()` decodes with orjson: prometheus-api-client calls `.json()` on
    every answer, and a 10k-GPU cycle's ~28 MB of JSON took the stdlib decoder ~0.45 CPU s,
    orjson ~0.3 (both with GC paused; measured on the development machine)."""

    def json(self, **kwargs: Any) -> Any:
        return orjson.loads(self.content)


class PrometheusClient:
    """Decoded answers (`instant`, `range`, `names`), raw bodies (`raw`) and the server's
    flags, from one Prometheus-compatible server. Thread-safe: each thread sees its own `Seen`."""

    def __init__(self, s: PromSettings) -> None:
        self.settings = s
        self._session = requests.Session()
        self._session.headers.update(dict(s.headers))
        if not s.compress:  # requests asks for gzip by default; see PromSettings.compress
            self._session.headers["Accept-Encoding"] = "identity"
        self._session.hooks["response"].append(self._capture)
        self.credentials = apply_auth(self._session, s.auth)
        self._local = threading.local()
        self._base = s.url.rstrip("/")
        self._conn = PrometheusConnect(
            url=self._base,
            retry=retry_policy(s),  # mounted on the session: `raw` and `flags` share it
            session=self._session,
            timeout=s.timeout,  # requests takes float seconds
        )

    def close(self) -> None:
        self._conn.close()

    # -- what every answer is checked for ------------------------------------------------

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
        seen.retry_after = _seconds(r.headers.get("Retry-After"))
        raw = getattr(self._local, "raw", False)  # the replay's parser reads its warnings
        if r.status_code != 200 or (not raw and (b'"warnings"' in body or flagged_partial(body))):
            seen.warnings, seen.error = _warnings_and_error(body)
        self._local.seen = seen

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """requests' and prometheus-api-client's exceptions -> the QueryFailed family."""
        timeout = self.settings.timeout
        try:
            yield
        except PrometheusApiClientException as exc:
            seen: Seen = self._local.seen
            raise _status_error(seen, str(exc)) from None
        except requests.exceptions.SSLError as exc:
            raise QueryRejected(
                f"TLS handshake failed: {_short(str(exc))}",
                source=self._base,
                hint="check the source's CA bundle and client certificate",
            ) from None
        except requests.exceptions.ConnectionError as exc:
            text = str(exc)
            if "timed out" in text:
                raise QueryTemporary(f"timed out after {timeout:g} s", source=self._base) from None
            raise PrometheusUnreachable(
                _short(text),
                source=self._base,
                hint="check --prometheus-url and that Prometheus is running",
            ) from None
        except requests.exceptions.Timeout:
            raise QueryTemporary(f"timed out after {timeout:g} s", source=self._base) from None
        except requests.exceptions.RequestException as exc:
            raise QueryTemporary(_short(str(exc)), source=self._base) from None
        except (KeyError, ValueError) as exc:  # a 200 that is not the API's JSON
            raise QueryTemporary(f"malformed answer ({exc!r})", source=self._base) from None

    def _call(self, fn: Callable[[], Any], expect: str) -> Answer:
        self._local.seen = Seen()
        with self._errors():
            result = fn()
        seen: Seen = self._local.seen
        if expect and seen.result_type != expect:
            raise QueryRejected(
                f"resultType {seen.result_type!r}, expected {expect!r}", source=self._base
            )
        if not isinstance(result, list):
            raise QueryRejected(f"unexpected result {type(result).__name__}", source=self._base)
        return result, seen

    def _params(self) -> dict[str, str]:
        return {"timeout": f"{max(1.0, self.settings.timeout):g}s"}

    # -- the requests -------------------------------------------------------------------

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

    def raw(self, selector: str, at: float) -> tuple[bytes, Seen]:
        """The undecoded body of an instant query on a range selector (`x[65m]`): every raw
        sample it holds at `at`, for observer.prometheus.replay.matrix to parse."""
        params = {**self._params(), "query": selector, "time": f"{at:.3f}"}
        self._local.seen = Seen()
        self._local.raw = True
        try:
            with self._errors():
                r = self._session.get(
                    self._base + "/api/v1/query", params=params, timeout=self.settings.timeout
                )
        finally:
            self._local.raw = False
        seen: Seen = self._local.seen
        seen.bytes_wire = len(r.content)
        if r.status_code != 200:
            raise _status_error(seen, r.reason or "")
        return r.content, seen

    def flags(self) -> dict[str, str]:
        """The server's command-line flags (`/api/v1/status/flags`); {} when not served
        (Thanos, Mimir, VictoriaMetrics answer PromQL without it)."""
        try:
            r = self._session.get(
                self._base + "/api/v1/status/flags", timeout=self.settings.timeout
            )
            data = r.json().get("data") if r.status_code == 200 else None
        except (requests.exceptions.RequestException, ValueError, AttributeError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _status_error(seen: Seen, fallback: str) -> QueryFailed:
    message = f"HTTP {seen.status}: {seen.error or fallback}"
    if seen.status in RETRY_STATUS or seen.status == 0:
        delay = seen.retry_after if seen.retry_after is not None else DEFAULT_DELAY
        return QueryTemporary(message, delay=delay)
    if seen.status in (401, 403):
        return QueryRejected(message, hint="check the credentials the source config names")
    return QueryRejected(message)


def _warnings_and_error(body: bytes) -> tuple[tuple[str, ...], str]:
    try:
        doc = json.loads(body)
    except ValueError:
        return (), body[:200].decode(errors="replace")
    if not isinstance(doc, dict):
        return (), ""
    warnings = tuple(str(w) for w in doc.get("warnings") or ())
    if doc.get("isPartial") is True:
        warnings += (PARTIAL_WARNING,)
    return warnings, f"{doc.get('errorType', '')}: {doc.get('error', '')}".strip(": ")


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None  # an HTTP date: not worth parsing for a hint


def _short(text: str) -> str:
    m = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)|(Name or service not known)", text)
    return (next(g for g in m.groups() if g) if m else text[:160]).strip()


__all__ = [
    "PARTIAL_WARNING",
    "Answer",
    "CredentialsUnreadable",
    "PrometheusClient",
    "PrometheusUnreachable",
    "QueryFailed",
    "QueryRejected",
    "QueryTemporary",
    "Seen",
    "apply_auth",
    "flagged_partial",
    "retry_policy",
]
