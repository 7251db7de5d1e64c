"""Fault injection for the simulated API server: make chosen requests fail the way real ones do.

Collectors and the actuator must survive 410 Gone (relist), 429 Too Many Requests (honour
Retry-After), 500s and slow answers. Tests arm a rule ("the next 2 GETs of /api/v1/pods answer
429"), run the client, and check it coped; no patching of the client.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any

REASONS = {
    410: ("Expired", "The resourceVersion for the provided watch is too old."),
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: injected by the gpufleet simulator"),
    503: ("ServiceUnavailable", "The server is currently unable to handle the request"),
    504: ("Timeout", "The server was unable to return a response in the time allotted"),
}


@dataclass(slots=True)
class FaultRule:
    """Answer the next `count` requests whose path matches `path` (a regex) with `status`.

    `status` 0 serves the request normally after `delay` seconds (a slow server); -1 closes
    the connection without answering (a reset).
    `count` < 0 means every matching request until cleared.
    """

    path: str
    status: int = 500
    count: int = 1
    retry_after: int = 1
    delay: float = 0.0
    method: str | None = None
    query: str | None = None
    """Substring the query string must contain (e.g. `watch=true`)."""
    hits: int = 0
    _rx: re.Pattern[str] | None = field(default=None, repr=False)

    def matches(self, method: str, path: str, query: str) -> bool:
        if self._rx is None:
            self._rx = re.compile(self.path)
        if self.method and self.method.upper() != method.upper():
            return False
        if self.query and self.query not in query:
            return False
        return self._rx.search(path) is not None

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "status": self.status,
            "count": self.count,
            "retry_after": self.retry_after,
            "delay": self.delay,
            "method": self.method,
            "query": self.query,
            "hits": self.hits,
        }


class FaultInjector:
    """Thread-safe list of fault rules, consulted by the server before each request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []

    def add(
        self,
        path: str,
        status: int = 500,
        count: int = 1,
        *,
        retry_after: int = 1,
        delay: float = 0.0,
        method: str | None = None,
        query: str | None = None,
    ) -> FaultRule:
        rule = FaultRule(path, status, count, retry_after, delay, method, query)
        re.compile(path)
        with self._lock:
            self._rules.append(rule)
        return rule

    def take(self, method: str, path: str, query: str) -> FaultRule | None:
        """The first armed rule matching this request (its count goes down by one)."""
        with self._lock:
            for rule in self._rules:
                if rule.count != 0 and rule.matches(method, path, query):
                    rule.hits += 1
                    if rule.count > 0:
                        rule.count -= 1
                    return rule
            return None

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def rules(self) -> list[FaultRule]:
        with self._lock:
            return list(self._rules)


def status_body(
    code: int,
    message: str | None = None,
    reason: str | None = None,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A `v1 Status` failure object, the body of every error the real API server returns."""
    default_reason, default_message = REASONS.get(code, ("Unknown", "error"))
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message or default_message,
        "reason": reason or default_reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body
