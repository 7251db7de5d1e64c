"""Raw samples over HTTP: one instant query on a range selector, body parsed by raw_matrix.

Range replays read millions of samples per chunk. The HTTP adapter (observer.prometheus.collector)
decodes every answer into Python objects (two per sample here), which costs more than
Prometheus takes to answer. So this module sends the same GET as the adapter (`/api/v1/query`,
settings' headers, timeout, urllib3 retries on connection errors, 429 and 5xx; gzip only when
`PromSettings.compress` asks for it: it costs Prometheus more CPU than the JSON itself) and
hands the bytes to observer.prometheus.replay.matrix, which parses them into arrays.
"""

from __future__ import annotations

import json
import threading
import time

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from observer.prometheus.answers import QueryFailed, Seen
from observer.prometheus.plan import PromSettings
from observer.prometheus.replay.matrix import MalformedAnswer, RawBlock, parse_matrix

RETRY_STATUS = (429, 500, 502, 503, 504)


class RawFetch:
    """`fetch(selector, at)` -> every raw sample the range selector holds at `at`."""

    def __init__(self, s: PromSettings) -> None:
        self.settings = s
        self._local = threading.local()
        self._lock = threading.Lock()
        self._sessions: list[requests.Session] = []
        self._url = s.url.rstrip("/") + "/api/v1/query"

    def _session(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            s = self.settings
            retry = Retry(
                total=s.retries, connect=s.retries, read=s.retries, status=s.retries,
                backoff_factor=s.backoff, backoff_max=max(s.backoff * 8, 1.0),
                status_forcelist=RETRY_STATUS, allowed_methods=frozenset({"GET"}),
                respect_retry_after_header=True, raise_on_status=False,
            )  # fmt: skip
            session = requests.Session()
            session.mount("http://", HTTPAdapter(max_retries=retry))
            session.mount("https://", HTTPAdapter(max_retries=retry))
            session.headers.update(dict(self.settings.headers))
            session.headers["Accept-Encoding"] = "gzip" if s.compress else "identity"
            self._local.session = session
            with self._lock:
                self._sessions.append(session)
        return session

    def fetch(self, selector: str, at: float) -> tuple[RawBlock, Seen, float]:
        """(samples, what the answer held, seconds spent). Raises QueryFailed."""
        s = self.settings
        params = {"query": selector, "time": f"{at:.3f}", "timeout": f"{max(1.0, s.timeout):g}s"}
        began = time.perf_counter()
        try:
            r = self._session().get(self._url, params=params, timeout=s.timeout)
            body = r.content
        except requests.exceptions.ConnectionError as exc:
            text = str(exc)
            if "timed out" in text:
                raise QueryFailed(f"timed out after {s.timeout:g} s", temporary=True) from None
            raise QueryFailed(text[:160], temporary=True, unreachable=True) from None
        except requests.exceptions.Timeout:
            raise QueryFailed(f"timed out after {s.timeout:g} s", temporary=True) from None
        except requests.exceptions.RequestException as exc:
            raise QueryFailed(str(exc)[:160], temporary=True) from None
        seen = Seen(status=r.status_code, bytes_body=len(body), bytes_wire=len(body))
        if r.status_code != 200:
            raise QueryFailed(
                f"HTTP {r.status_code}: {_error(body)}",
                temporary=r.status_code in RETRY_STATUS,
            )
        try:
            block, warnings = parse_matrix(body)
        except MalformedAnswer as exc:
            raise QueryFailed(str(exc), temporary=False) from None
        seen.result_type = "matrix"
        seen.warnings = warnings
        return block, seen, time.perf_counter() - began

    def flags(self) -> dict[str, str]:
        """The server's command-line flags (`/api/v1/status/flags`); {} when not served
        (Thanos, Mimir and others answer PromQL without it)."""
        url = self.settings.url.rstrip("/") + "/api/v1/status/flags"
        try:
            r = self._session().get(url, timeout=self.settings.timeout)
            data = r.json().get("data") if r.status_code == 200 else None
        except (requests.exceptions.RequestException, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def close(self) -> None:
        with self._lock:
            for session in self._sessions:
                session.close()
            self._sessions.clear()


_WORKER: RawFetch | None = None


def fetch_in_worker(s: PromSettings, selector: str, at: float) -> tuple[RawBlock, Seen, float]:
    """`RawFetch(s).fetch(selector, at)` in a worker process (one session per process), so
    that parsing millions of samples does not hold the replaying process' interpreter."""
    global _WORKER
    if _WORKER is None or _WORKER.settings != s:
        _WORKER = RawFetch(s)
    return _WORKER.fetch(selector, at)


def _error(body: bytes) -> str:
    try:
        doc = json.loads(body)
        return f"{doc.get('errorType', '')}: {doc.get('error', '')}".strip(": ")
    except ValueError:
        return body[:200].decode(errors="replace")
