"""Fetching exporter pages concurrently, each with its own timeout, for the direct-scrape mode.

A thread pool of `concurrency` workers GETs every target; a target that is slow, refuses or
answers non-200 is a failed target for this round (never the whole round). Target discovery
reads a JSON list of URLs (the simulator's `/targets`), or Prometheus file_sd groups.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests
from requests.adapters import HTTPAdapter

ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"


@dataclass(frozen=True, slots=True)
class Fetched:
    url: str
    text: str | None
    """Page body, None when the target failed."""
    error: str
    seconds: float
    bytes: int


def new_session(concurrency: int) -> requests.Session:
    s = requests.Session()
    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=max(4, concurrency))
    s.mount("http://", adapter)
    s.mount("https://", adapter)
    s.headers["Accept"] = ACCEPT
    return s


def fetch_one(session: requests.Session, url: str, timeout: float) -> Fetched:
    t0 = time.perf_counter()
    try:
        r = session.get(url, timeout=timeout)
        body = r.content
        if r.status_code != 200:
            return Fetched(url, None, f"HTTP {r.status_code}", time.perf_counter() - t0, len(body))
        return Fetched(
            url, body.decode("utf-8", "replace"), "", time.perf_counter() - t0, len(body)
        )
    except requests.exceptions.Timeout:
        return Fetched(url, None, f"timed out after {timeout:g} s", time.perf_counter() - t0, 0)
    except requests.exceptions.RequestException as exc:
        reason = type(exc).__name__
        return Fetched(url, None, f"{reason}: {str(exc)[:160]}", time.perf_counter() - t0, 0)


def fetch_all(
    pool: ThreadPoolExecutor, session: requests.Session, urls: Sequence[str], timeout: float
) -> list[Fetched]:
    return list(pool.map(lambda u: fetch_one(session, u, timeout), urls))


def targets_from_document(doc: Any, base: str) -> list[str]:
    """URLs from a JSON list of URLs, or from Prometheus file_sd groups."""
    out: list[str] = []
    if not isinstance(doc, list):
        raise ValueError("expected a JSON list of URLs or of file_sd target groups")
    scheme = urlsplit(base).scheme or "http"
    for item in doc:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            path = str(item.get("labels", {}).get("__metrics_path__", "/metrics"))
            out += [urlunsplit((scheme, str(t), path, "", "")) for t in item.get("targets", [])]
    return out


def discover(session: requests.Session, url: str, timeout: float) -> list[str]:
    """Exporter URLs listed at `url` (e.g. the simulator's http://host:port/targets)."""
    r = session.get(url, timeout=timeout, headers={"Accept": "application/json"})
    r.raise_for_status()
    return targets_from_document(r.json(), url)
