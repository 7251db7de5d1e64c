"""Per-cycle accounting of a collection, shared by every collector.

A collection cycle either yields a snapshot (possibly *degraded*: some queries or targets failed,
and `TelemetryHealth.degraded_reason` says which) or raises one of the `errors` vocabulary
(`TemporaryError`: Prometheus down, timing out, overloaded; `PermanentError`: wrong URL, bad
credentials, a query Prometheus rejects), in which case no snapshot exists: the caller must not
invent one.
"""

from __future__ import annotations

from dataclasses import dataclass, field


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
