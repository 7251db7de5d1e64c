"""Raw samples -> what PromQL answers at each step of a replay, for all steps at once.

A range replay evaluates the instant cycle's selectors at steps t_0 < t_1 < ... itself instead
of asking Prometheus to (observer.prometheus.replay.range_replay). Two primitives, vectorised over
(series x step):

- `newest`: the newest sample at or before each step, and whether it is within the lookback
  delta — an instant vector selector. Prometheus 2.x counts a sample exactly `lookback` old
  (closed interval); 3.x does not (`left_open`).
- `increase`: PromQL's `increase(x[w])` — reset-aware (a drop means the counter restarted, and
  the value before the drop is added) and extrapolated by the rules in observer.promql (left-open
  windows are taken to mean 3.x).

Times are integer milliseconds, as Prometheus stores them, so window edges compare exactly.
"""

from __future__ import annotations

import numpy as np

from observer.fleet.model import FloatArray
from observer.prometheus.replay.matrix import RawBlock
from observer.promql import extrapolate, fresh, semantics_of

IndexGrid = np.ndarray
"""(series x step) int64: a flat sample index, -1 for none."""


def newest_at_or_before(block: RawBlock, steps_ms: np.ndarray) -> IndexGrid:
    """Per series and step, the flat index of the newest sample with t <= step (-1: none):
    the series' first index plus how many of its samples came by then, minus one."""
    n, k = len(block), int(steps_ms.shape[0])
    if block.samples == 0 or k == 0:
        return np.full((n, k), -1, dtype=np.int64)
    cell = np.searchsorted(steps_ms, block.t_ms, side="left")  # first step that sees it
    cell += block.series_of_sample() * (k + 1)  # column k: samples after the last step
    came = np.bincount(cell, minlength=n * (k + 1)).reshape(n, k + 1)[:, :k].cumsum(axis=1)
    grid: IndexGrid = came + (block.starts[:-1, None] - 1)
    grid[came == 0] = -1
    return grid


def newest(block: RawBlock, steps_ms: np.ndarray, lookback_ms: int, left_open: bool) -> IndexGrid:
    """An instant selector at each step: the newest sample within the lookback (-1: none)."""
    grid = newest_at_or_before(block, steps_ms)
    ok = grid >= 0
    t = block.t_ms[np.maximum(grid, 0)]
    ok &= fresh(t, steps_ms[None, :], lookback_ms, left_open)
    grid[~ok] = -1
    return grid


def pick(values: np.ndarray, grid: IndexGrid) -> np.ndarray:
    """values[grid] with NaN where the grid has no sample."""
    out: np.ndarray = values[np.maximum(grid, 0)].astype(np.float64, copy=False)
    out[grid < 0] = np.nan
    return out


def increase(block: RawBlock, steps_ms: np.ndarray, window_ms: int, left_open: bool) -> FloatArray:
    """`increase(x[window])` per series and step, NaN where fewer than two samples."""
    n, k = len(block), int(steps_ms.shape[0])
    if block.samples == 0 or k == 0:
        return np.full((n, k), np.nan)
    hi = newest_at_or_before(block, steps_ms)
    edge = steps_ms - window_ms - (0 if left_open else 1)  # samples <= edge are outside
    before = newest_at_or_before(block, edge)
    first_of_series = block.starts[:-1][:, None]
    lo = np.where(before >= 0, before + 1, first_of_series)
    count = hi - lo + 1
    ok = (hi >= 0) & (count >= 2)
    hi_ = np.where(ok, hi, 0)
    lo_ = np.where(ok, lo, 0)
    t, v = block.t_ms, block.values
    first_v, last_v = v[lo_], v[hi_]
    result = last_v - first_v + _resets(block, lo_, hi_, ok)
    t_first, t_last = t[lo_], t[hi_]
    sampled = (t_last - t_first) / 1000.0
    to_start = (t_first - (steps_ms - window_ms)[None, :]) / 1000.0
    to_end = (steps_ms[None, :] - t_last) / 1000.0
    sem = semantics_of(left_open)
    out = extrapolate(result, first_v, count, sampled, to_start, to_end, sem.zero_point_first)
    out[~ok] = np.nan
    return out


def _resets(block: RawBlock, lo: IndexGrid, hi: IndexGrid, ok: np.ndarray) -> FloatArray:
    """Sum of the values just before each drop inside [lo, hi] (counter resets are rare, so
    the sum is built per drop, exactly, rather than from a running float sum)."""
    v = block.values
    out = np.zeros(lo.shape)
    if v.shape[0] < 2:
        return out
    drop = np.flatnonzero(v[1:] < v[:-1]) + 1
    if drop.size == 0:
        return out
    series = block.series_of_sample()
    drop = drop[series[drop] == series[drop - 1]]  # not across series
    for i in drop.tolist():
        row = int(series[i])
        inside = ok[row] & (lo[row] <= i - 1) & (hi[row] >= i)
        out[row, inside] += v[i - 1]
    return out
