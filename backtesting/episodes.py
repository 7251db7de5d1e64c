"""Per-cycle findings -> one finding per continuous episode per (entity, kind).

Detectors restate a condition every cycle it holds; people, `backtest` output and the scorer
want one record per episode: when it began (`first_seen`), when it was last seen, and its worst
severity. An episode ends when a cycle passes without the entity being reported (after
`grace_cycles` further silent cycles, so that one missing scrape does not split an episode).
Cycles in which the episode's node, or the whole fleet, is in a monitoring gap do not count as
silent: not seeing a fault is not seeing it end.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

from detectors.findings import Finding, FindingKind

EntityKey = tuple[str, str | None, str | None, str | None]


@dataclass(slots=True)
class _Open:
    finding: Finding
    missed: int = 0


@dataclass(slots=True)
class EpisodeTracker:
    """Feed `observe(now, findings)` in time order; read `closed` and `finish()`."""

    grace_cycles: int = 0
    """Silent cycles tolerated inside one episode (0: the first silent cycle ends it)."""
    open: dict[EntityKey, _Open] = field(default_factory=dict)
    closed: list[Finding] = field(default_factory=list)

    def observe(self, now: float, findings: Iterable[Finding]) -> list[Finding]:
        """Merge one cycle's findings; returns the episodes that ended in this cycle."""
        seen: set[EntityKey] = set()
        cycle = list(findings)
        for f in cycle:
            key = f.entity
            seen.add(key)
            cur = self.open.get(key)
            if cur is None:
                opened = {**f.evidence, "detected_at": now}
                self.open[key] = _Open(dataclasses.replace(f, evidence=opened))
            else:
                cur.finding = _merge(cur.finding, f)
                cur.missed = 0
        # Blind spots are not evidence of recovery: an episode on a node (or fleet) whose
        # telemetry is in a monitoring gap this cycle stays open without counting a miss.
        gaps = [f for f in cycle if f.kind == FindingKind.MONITORING_GAP]
        fleet_blind = any(f.node is None for f in gaps)
        blind = {f.node for f in gaps}
        ended: list[Finding] = []
        for key in [k for k in self.open if k not in seen]:
            cur = self.open[key]
            if key[0] != FindingKind.MONITORING_GAP.value and (fleet_blind or key[1] in blind):
                continue
            cur.missed += 1
            if cur.missed > self.grace_cycles:
                ended.append(cur.finding)
                del self.open[key]
        self.closed.extend(ended)
        return ended

    def active(self) -> list[Finding]:
        return [o.finding for o in self.open.values()]

    def finish(self) -> list[Finding]:
        """Every episode, closed and still open, ordered by first_seen."""
        out = self.closed + self.active()
        return sorted(out, key=lambda f: (f.first_seen, f.kind.value, f.node or "", f.job or ""))


def _merge(old: Finding, new: Finding) -> Finding:
    """Keep the episode's start; take the worse severity's wording; extend last_seen."""
    first = min(old.first_seen, new.first_seen)
    last = max(old.last_seen, new.last_seen)
    base = new if new.severity.rank > old.severity.rank else old
    peak = dict(base.evidence)
    if base is old and new.severity.rank == old.severity.rank:
        peak = dict(new.evidence)  # same severity: the latest evidence is the most useful
        base = dataclasses.replace(old, summary=new.summary)
    peak["detected_at"] = old.evidence.get("detected_at", new.last_seen)
    return dataclasses.replace(base, first_seen=first, last_seen=last, evidence=peak)


def episodes(
    cycles: Iterable[tuple[float, Iterable[Finding]]], grace_cycles: int = 0
) -> list[Finding]:
    """All episodes of a replay given as (now, findings) per cycle in time order."""
    tracker = EpisodeTracker(grace_cycles=grace_cycles)
    for now, found in cycles:
        tracker.observe(now, found)
    return tracker.finish()
