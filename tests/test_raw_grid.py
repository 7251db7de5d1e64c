"""observer.prometheus.replay.step_grid against plain loops: PromQL instant selectors and
`increase()` per step."""

from __future__ import annotations

import numpy as np
import pytest

from observer.prometheus.cycle import chunk_span
from observer.prometheus.replay.matrix import RawBlock
from observer.prometheus.replay.step_grid import increase, newest
from observer.promql import parse_duration


def block(rng: np.random.Generator, n: int = 40) -> RawBlock:
    """Counters scraped every ~30 s with jitter, gaps, late starts and resets."""
    times: list[np.ndarray] = []
    values: list[np.ndarray] = []
    for _ in range(n):
        t = np.cumsum(rng.integers(25_000, 36_000, size=rng.integers(1, 60)))
        t = t[rng.random(t.size) > 0.1] + 1_000_000 + rng.integers(0, 600_000)  # gaps
        v = np.cumsum(rng.random(t.size) * 10)
        if t.size > 3 and rng.random() < 0.5:
            v[t.size // 2 :] -= v[t.size // 2] - rng.random()  # a reset
        times.append(t.astype(np.int64))
        values.append(v)
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum([t.size for t in times], out=starts[1:])
    return RawBlock([{"i": str(i)} for i in range(n)], starts, np.concatenate(times),
                    np.concatenate(values))  # fmt: skip


def loop_increase(t: np.ndarray, v: np.ndarray, at: int, w: int, left_open: bool) -> float:
    """promql/functions.go extrapolatedRate, one series, one step, as a loop (2.x order of the
    zero-point cap and the threshold; 3.x, whose windows are left-open, the other way)."""
    sel = (t > at - w) if left_open else (t >= at - w)
    sel &= t <= at
    ts, vs = t[sel] / 1000.0, v[sel]
    if ts.size < 2:
        return np.nan
    result = vs[-1] - vs[0] + sum(vs[i - 1] for i in range(1, vs.size) if vs[i] < vs[i - 1])
    sampled = ts[-1] - ts[0]
    avg = sampled / (ts.size - 1)
    to_start, to_end = ts[0] - (at - w) / 1000.0, at / 1000.0 - ts[-1]
    zero = sampled * (vs[0] / result) if result > 0 and vs[0] >= 0 else np.inf
    if left_open:
        to_start = min(to_start if to_start < avg * 1.1 else avg / 2, zero)
    else:
        to_start = min(to_start, zero)
        to_start = to_start if to_start < avg * 1.1 else avg / 2
    span = sampled + to_start + (to_end if to_end < avg * 1.1 else avg / 2)
    return float(result * span / sampled)


@pytest.mark.parametrize("left_open", [False, True])
def test_newest_and_increase_match_loops(left_open: bool) -> None:
    rng = np.random.default_rng(7)
    b = block(rng)
    steps = np.arange(1_000_000, 3_500_000, 30_000, dtype=np.int64)  # on and off sample times
    grid = newest(b, steps, 300_000, left_open)
    inc = increase(b, steps, 120_000, left_open)
    for s in range(len(b)):
        t = b.t_ms[b.starts[s] : b.starts[s + 1]]
        v = b.values[b.starts[s] : b.starts[s + 1]]
        for k, at in enumerate(steps.tolist()):
            fresh = (t > at - 300_000) if left_open else (t >= at - 300_000)
            ok = np.flatnonzero(fresh & (t <= at))
            want = b.starts[s] + ok[-1] if ok.size else -1
            assert grid[s, k] == want
            expect = loop_increase(t, v, at, 120_000, left_open)
            assert inc[s, k] == pytest.approx(expect, rel=1e-12, nan_ok=True), (s, k)


def test_durations_and_chunk_spans() -> None:
    assert parse_duration("5m") == 300 and parse_duration("1m30s") == 90
    assert parse_duration("250ms") == 0.25 and parse_duration("") is None
    assert parse_duration("5 minutes") is None
    assert chunk_span(3600, 30, 1_000, 30.0) == 3600  # ~3M samples an hour: one chunk
    assert chunk_span(3600, 30, 10_000, 30.0) == pytest.approx(480)
    assert chunk_span(3600, 30, 1_000_000, 1.0) == 30  # never below one step
