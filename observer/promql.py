"""PromQL semantics, once: `increase` with Prometheus' extrapolation, lookback and staleness.

Every path that answers "what would Prometheus say" uses this module: the range replay
(observer.prometheus.replay.step_grid, samples laid out flat per series), the direct-scrape
collector's ring of recent samples (observer.scrape.ring_window) and the simulator's snapshots
(simulator.snapshot). It imports nothing but numpy, so the scrape path and the simulator use it
without importing the Prometheus collector.

The rules, from promql/functions.go (`extrapolatedRate`) and the engine's selectors:

- An instant selector answers a series' newest sample at or before the evaluation time `t` if
  it lies within the lookback delta (`--query.lookback-delta`, 5 min by default). Backfilled
  data has no staleness markers, so a series that vanished keeps answering with its old sample
  until the lookback passes.
- A range `x[w]` at `t` holds the samples in `[t - w, t]` (Prometheus 2.x) or `(t - w, t]`
  (3.x: left-open); the lookback window follows the same rule.
- `increase(x[w])` needs two samples; it sums the deltas between consecutive samples, a drop
  counting as a counter reset (the new value is the increase), then extrapolates to the window
  edges: towards each edge by the distance to it when that is under 1.1 average sample
  intervals, else by half an interval; towards the start never past the counter's zero point.
  2.x caps at the zero point before the 1.1-interval test, 3.x after it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

FloatArray = np.ndarray

DEFAULT_LOOKBACK = 300.0
"""Prometheus' default `--query.lookback-delta`, seconds."""

LEFT_OPEN_PROBE = "count_over_time(vector(1)[60s:30s])"
"""3 points on a closed window (Prometheus 2.x), 2 on a left-open one (3.x)."""

EXTRAPOLATION_THRESHOLD = 1.1
"""Extrapolate to a window edge only when it is closer than this many average intervals."""


@dataclass(frozen=True, slots=True)
class Semantics:
    """Which Prometheus a computation imitates.

    `left_open`: ranges and the lookback exclude their left edge (3.x); `zero_point_first`:
    the extrapolation towards the start is capped at the counter's zero point before the
    1.1-interval test (2.x) rather than after it (3.x)."""

    left_open: bool
    zero_point_first: bool


PROMETHEUS_2 = Semantics(left_open=False, zero_point_first=True)
PROMETHEUS_3 = Semantics(left_open=True, zero_point_first=False)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def parse_duration(text: str) -> float | None:
    """Seconds of a Prometheus duration (`5m`, `1m30s`, as its flags report them); None when
    it is not one."""
    parts = _DURATION.findall(text or "")
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNIT[u] for n, u in parts)


def semantics_of(left_open: bool) -> Semantics:
    """The server's semantics from its window probe: left-open windows mean Prometheus 3."""
    return PROMETHEUS_3 if left_open else PROMETHEUS_2


def in_window(
    t: np.ndarray, lo: float | np.ndarray, hi: float | np.ndarray, left_open: bool
) -> np.ndarray:
    """Whether sample times `t` fall in the range `[lo, hi]` (or `(lo, hi]` when left-open)."""
    after_lo = (t > lo) if left_open else (t >= lo)
    return np.asarray(after_lo & (t <= hi))


def fresh(t: np.ndarray, at: float | np.ndarray, lookback: float, left_open: bool) -> np.ndarray:
    """Whether a newest sample at time `t` (<= `at`) still answers an instant query at `at`."""
    oldest = at - lookback
    return np.asarray((t > oldest) if left_open else (t >= oldest))


def extrapolate(
    delta: np.ndarray,
    first_v: np.ndarray,
    count: np.ndarray,
    sampled: np.ndarray,
    to_start: np.ndarray,
    to_end: np.ndarray,
    zero_point_first: bool,
) -> FloatArray:
    """`increase` from a window's reset-aware `delta`, its first value and sample `count`, the
    seconds between first and last sample (`sampled`) and from the window's edges to them
    (`to_start`, `to_end`). NaN where fewer than two samples or no time between them. All
    arrays broadcast together; the arithmetic is Prometheus' own, operation for operation."""
    with np.errstate(invalid="ignore", divide="ignore"):
        avg = sampled / np.maximum(count - 1, 1)
        threshold = avg * EXTRAPOLATION_THRESHOLD
        to_zero = np.where(delta > 0, sampled * (first_v / np.where(delta > 0, delta, 1.0)), np.inf)
        cap = (delta > 0) & (first_v >= 0)
        if zero_point_first:  # 2.x: the counter's zero point first, then the threshold
            to_start = np.where(cap & (to_zero < to_start), to_zero, to_start)
            to_start = np.where(to_start < threshold, to_start, avg / 2)
        else:  # 3.x: the threshold first, then the zero point
            to_start = np.where(to_start < threshold, to_start, avg / 2)
            to_start = np.where(cap & (to_zero < to_start), to_zero, to_start)
        span = sampled + to_start + np.where(to_end < threshold, to_end, avg / 2)
        out: FloatArray = np.asarray(delta * (span / sampled), dtype=np.float64)
    out = np.where((count >= 2) & (sampled > 0), out, np.nan)
    return out


def increase_columns(
    t: np.ndarray, v: np.ndarray, lo: float, hi: float, semantics: Semantics
) -> FloatArray:
    """`increase(x[hi - lo])` at `hi` per column of samples.

    `v`: (k, n) values, NaN for absent samples; `t`: their times, (k, n) in any slot order
    (a ring buffer) or (k,) shared by all columns. Result (n,), NaN where a column has fewer
    than two samples in the window."""
    v = np.asarray(v, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64)
    t = np.broadcast_to(t[:, None] if t.ndim == 1 else t, v.shape)
    n = v.shape[1]
    present = in_window(t, lo, hi, semantics.left_open) & ~np.isnan(v)
    if not present.any():
        return np.full(n, np.nan)
    order = np.argsort(np.where(present, t, np.inf), axis=0, kind="stable")
    ts = np.take_along_axis(np.where(present, t, np.nan), order, axis=0)
    vs = np.take_along_axis(v, order, axis=0)
    ok = np.take_along_axis(present, order, axis=0)  # present samples first, oldest first
    count = ok.sum(axis=0)
    prev, cur = vs[:-1], vs[1:]
    step = np.where(cur >= prev, cur - prev, cur)  # after a reset the new value is the increase
    delta = np.where(ok[:-1] & ok[1:], step, 0.0).sum(axis=0)
    cols = np.arange(n)
    last = np.maximum(count - 1, 0)
    first_t, first_v, last_t = ts[0], vs[0], ts[last, cols]
    return extrapolate(
        delta,
        first_v,
        count,
        last_t - first_t,
        first_t - lo,
        hi - last_t,
        semantics.zero_point_first,
    )


__all__ = [
    "DEFAULT_LOOKBACK",
    "LEFT_OPEN_PROBE",
    "PROMETHEUS_2",
    "PROMETHEUS_3",
    "Semantics",
    "extrapolate",
    "fresh",
    "in_window",
    "increase_columns",
    "parse_duration",
    "semantics_of",
]
