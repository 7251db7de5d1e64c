"""Drive one detector (or the suite) over hand-built snapshots in time order, as backtest does."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from detectors.findings import Finding
from detectors.registry import bind
from tests.fleet import Fleet


def replay(
    name: str,
    fleet: Fleet,
    times: Iterable[float],
    change: Callable[[Fleet, float], None] | None = None,
    params: Any = None,
) -> list[tuple[float, list[Finding]]]:
    """Run detector `name` at each time; `change(fleet, t)` edits the fleet before each snapshot."""
    det = bind(name, params)
    state: Any = None
    out: list[tuple[float, list[Finding]]] = []
    for t in times:
        if change is not None:
            change(fleet, t)
        found, state = det.detect(fleet.snapshot(t), state, t)
        out.append((t, found))
    return out


def first_fire(cycles: list[tuple[float, list[Finding]]], min_rank: int = 0) -> float | None:
    for t, found in cycles:
        if any(f.severity.rank >= min_rank for f in found):
            return t
    return None


def all_findings(cycles: list[tuple[float, list[Finding]]]) -> list[Finding]:
    return [f for _, found in cycles for f in found]


def steps(start: float, end: float, interval: float = 30.0) -> list[float]:
    out = []
    t = start
    while t <= end:
        out.append(t)
        t += interval
    return out
