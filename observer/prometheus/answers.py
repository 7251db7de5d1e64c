"""What a Prometheus request can report: a failure (temporary or not) and what the answer held.

Shared by the HTTP adapter (observer.prometheus.collector), the cycles (observer.prometheus.cycle)
and the
raw-sample fetch of range replays (observer.prometheus.replay.fetch), so neither imports the other
for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PARTIAL_WARNING = "partial response (isPartial: true): some storage nodes did not answer"
"""VictoriaMetrics cluster flags partial answers with `isPartial` instead of `warnings`; both
make the answer partial (the cycle degraded, its sparse counters unknown, never zero)."""
_PARTIAL = re.compile(rb'"isPartial"\s*:\s*true')


def flagged_partial(body: bytes) -> bool:
    """True when an answer body carries VictoriaMetrics' `"isPartial": true`."""
    return b'"isPartial"' in body and _PARTIAL.search(body) is not None


class QueryFailed(Exception):
    def __init__(self, message: str, *, temporary: bool, unreachable: bool = False) -> None:
        super().__init__(message)
        self.temporary = temporary
        self.unreachable = unreachable

    def __reduce__(self) -> tuple[object, ...]:  # crosses process boundaries (raw fetch)
        return _rebuild, (str(self), self.temporary, self.unreachable)


def _rebuild(message: str, temporary: bool, unreachable: bool) -> QueryFailed:
    return QueryFailed(message, temporary=temporary, unreachable=unreachable)


@dataclass(slots=True)
class Seen:
    status: int = 0
    bytes_wire: int = 0
    bytes_body: int = 0
    result_type: str = ""
    warnings: tuple[str, ...] = ()
    error: str = ""
