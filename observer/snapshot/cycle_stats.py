"""The collectors' error vocabulary and per-cycle accounting, shared by every collector.

A collection cycle either yields a snapshot (possibly *degraded*: some queries or targets failed,
and `TelemetryHealth.degraded_reason` says which) or raises `CollectionError`, in which case no
snapshot exists: the caller must not invent one. `temporary` tells the caller whether retrying
later may help (Prometheus down, timing out, overloaded) or a person must fix something first
(wrong URL, bad credentials, a query Prometheus rejects).
"""

from __future__ import annotations

from dataclasses import dataclass, field


class CollectionError(Exception):
    """No snapshot this cycle. `hint` is the next step for a person (shown by the CLI)."""

    def __init__(self, message: str, *, temporary: bool, source: str = "", hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.temporary = temporary
        self.source = source
        self.hint = hint

    def render(self) -> str:
        kind = "temporary" if self.temporary else "permanent"
        text = f"{self.message} ({kind})"
        return f"{text}; {self.hint}" if self.hint else text


@dataclass(frozen=True, slots=True)
class QueryStat:
    """One request of a cycle: what it asked, what it cost, how it ended."""

    name: str
    seconds: float
    bytes_wire: int
    """Bytes received on the socket (compressed when the server gzips); 0 when the transport
    does not tell (chunked responses): see `bytes_body`."""
    bytes_body: int
    """Bytes of the decoded response body."""
    series: int
    ok: bool
    problem: str = ""


@dataclass(frozen=True, slots=True)
class CycleStats:
    """Accounting of one collection cycle, for logs, the CLI and the benchmarks."""

    queries: tuple[QueryStat, ...] = ()
    seconds: float = 0.0
    problems: tuple[str, ...] = field(default_factory=tuple)

    @property
    def query_count(self) -> int:
        return len(self.queries)

    @property
    def bytes_wire(self) -> int:
        return sum(q.bytes_wire for q in self.queries)

    @property
    def bytes_body(self) -> int:
        return sum(q.bytes_body for q in self.queries)

    @property
    def degraded(self) -> bool:
        return bool(self.problems)

    @property
    def reason(self) -> str:
        return "; ".join(self.problems)
