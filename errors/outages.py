"""One concise log line per failing dependency per minute, and one when it recovers.

A dependency that is down (the store, the exporters, the Kubernetes API) fails every cycle and
every worker pass; a traceback each time buries the one fact an operator needs: what is down,
since when, and why. The full traceback stays available at DEBUG.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.exc import DBAPIError

from errors import GpufleetError

EVERY = 60.0
"""Seconds between repeated lines about the same failing dependency."""


@dataclass
class _Down:
    since: float
    logged_at: float
    failures: int = 0


class OutageLog:
    def __init__(
        self,
        logger: logging.Logger,
        every: float = EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log = logger
        self.every = every
        self.clock = clock
        self._down: dict[str, _Down] = {}
        self._lock = threading.Lock()

    def failed(self, dependency: str, cause: str, exc: BaseException | None = None) -> None:
        """Note a failure of `dependency`: logged at once the first time, then at most once per
        `every` seconds with the count of failures since the last line."""
        now = self.clock()
        with self._lock:
            d = self._down.get(dependency)
            if d is None:
                d = self._down[dependency] = _Down(now, now - self.every)
            d.failures += 1
            due = now - d.logged_at >= self.every
            if due:
                n, d.failures, d.logged_at = d.failures, 0, now
                lasted = now - d.since
        if due:
            self.log.warning(
                "%s failing for %.0f s (%d failure%s since the last report): %s",
                dependency, lasted, n, "" if n == 1 else "s", cause,
            )  # fmt: skip
        if exc is not None and self.log.isEnabledFor(logging.DEBUG):
            self.log.debug("%s failure", dependency, exc_info=exc)

    def exception(self, where: str, exc: BaseException) -> None:
        """An exception caught at `where`: a known dependency's outage (the store's database
        errors, gpufleet's own temporary errors) is one line per minute; anything else is a
        bug and keeps its traceback."""
        dep = dependency_of(exc)
        if dep is None:
            self.log.error("%s", where, exc_info=exc)
        else:
            self.failed(dep, f"{where}: {brief(exc)}", exc)

    def recovered(self, dependency: str) -> None:
        with self._lock:
            d = self._down.pop(dependency, None)
        if d is not None:
            self.log.warning("%s recovered after %.0f s", dependency, self.clock() - d.since)

    def all_recovered(self, but: frozenset[str] = frozenset()) -> None:
        """Everything that worked this time: each failing dependency (other than `but`, which
        the caller judges itself) says it recovered, once."""
        for dependency in [d for d in self.down() if d not in but]:
            self.recovered(dependency)

    def down(self) -> dict[str, float]:
        """Failing dependencies -> seconds they have been failing."""
        now = self.clock()
        with self._lock:
            return {k: now - d.since for k, d in self._down.items()}


def dependency_of(exc: BaseException) -> str | None:
    """Which dependency an exception says is failing (None: not an outage, a bug)."""
    if isinstance(exc, DBAPIError):
        return "store"
    if isinstance(exc, GpufleetError) and exc.temporary:
        return exc.source or "dependency"
    return None


def brief(exc: BaseException) -> str:
    """One line about `exc` (a database error's driver message, not its SQL)."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
