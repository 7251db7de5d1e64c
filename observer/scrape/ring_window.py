"""A bounded rolling window of samples per series, in numpy ring buffers.

The direct-scrape collector has no Prometheus to ask for `increase()`, so it keeps the last
`capacity` samples of every counter series itself and computes the same reset-aware,
extrapolated increase PromQL does (Prometheus' `extrapolatedRate`, range closed on both ends as
in Prometheus 2.x). Memory is fixed per series: two float64 rings (time, value) of `capacity`
slots, i.e. 16 * capacity bytes; series not seen for `retention` seconds give their column back.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from observer.fleet.model import FloatArray


class RingWindow:
    """Series key -> column; per column a ring of (time, value) samples."""

    def __init__(self, capacity: int = 8, retention: float = 900.0) -> None:
        if capacity < 2:
            raise ValueError("capacity must be at least 2")
        self.capacity = capacity
        self.retention = retention
        self._index: dict[str, int] = {}
        self._free: list[int] = []
        self._t = np.full((capacity, 0), np.nan)
        self._v = np.full((capacity, 0), np.nan)
        self._head = np.zeros(0, dtype=np.int64)
        self._last = np.zeros(0)

    def __len__(self) -> int:
        return len(self._index)

    @property
    def nbytes(self) -> int:
        """Bytes held by the rings and bookkeeping arrays (not the key dict)."""
        return int(self._t.nbytes + self._v.nbytes + self._head.nbytes + self._last.nbytes)

    def _grow(self, need: int) -> None:
        old = self._t.shape[1]
        new = max(need, 2 * old, 64)
        for name in ("_t", "_v"):
            arr = np.full((self.capacity, new), np.nan)
            arr[:, :old] = getattr(self, name)
            setattr(self, name, arr)
        self._head = np.concatenate([self._head, np.zeros(new - old, dtype=np.int64)])
        self._last = np.concatenate([self._last, np.full(new - old, -np.inf)])
        self._free.extend(range(new - 1, old - 1, -1))

    def columns(self, keys: Sequence[str]) -> np.ndarray:
        """Column of each key, allocating new ones."""
        index = self._index
        missing = [k for k in dict.fromkeys(keys) if k not in index]
        if len(missing) > len(self._free):
            self._grow(self._t.shape[1] + len(missing) - len(self._free))
        for k in missing:
            col = self._free.pop()
            index[k] = col
            self._t[:, col] = np.nan
            self._v[:, col] = np.nan
            self._head[col] = 0
        return np.fromiter((index[k] for k in keys), dtype=np.int64, count=len(keys))

    def push(self, keys: Sequence[str], times: float | FloatArray, values: FloatArray) -> None:
        """Append one sample per key (a key repeated in one push keeps the last)."""
        if not keys:
            return
        cols = self.columns(keys)
        times = np.broadcast_to(np.asarray(times, dtype=np.float64), cols.shape)
        newer = times > self._last[cols]  # the same scrape pushed twice is one sample
        cols, times, values = cols[newer], times[newer], np.asarray(values, np.float64)[newer]
        heads = self._head[cols]
        self._t[heads, cols] = times
        self._v[heads, cols] = values
        self._head[cols] = (heads + 1) % self.capacity
        self._last[cols] = times

    def expire(self, now: float) -> int:
        """Free the columns of series silent for longer than `retention`; how many."""
        old = [k for k, c in self._index.items() if self._last[c] < now - self.retention]
        for k in old:
            self._free.append(self._index.pop(k))
        return len(old)

    def increase(self, keys: Sequence[str], now: float, window: float) -> FloatArray:
        """PromQL `increase(x[window])` at `now` per key (NaN: unknown key or < 2 samples)."""
        out = np.full(len(keys), np.nan)
        known = [i for i, k in enumerate(keys) if k in self._index]
        if not known:
            return out
        cols = np.fromiter((self._index[keys[i]] for i in known), np.int64, len(known))
        out[known] = extrapolated_increase(self._t[:, cols], self._v[:, cols], now - window, now)
        return out


def extrapolated_increase(t: FloatArray, v: FloatArray, lo: float, hi: float) -> FloatArray:
    """Prometheus' extrapolatedRate (counter, not per-second) over columns of samples.

    `t`, `v`: (k, n) sample times/values, NaN for empty slots, in any slot order.
    """
    t = np.where((t >= lo) & (t <= hi), t, np.nan)
    order = np.argsort(np.where(np.isnan(t), np.inf, t), axis=0)
    ts = np.take_along_axis(t, order, axis=0)
    vs = np.take_along_axis(v, order, axis=0)
    ok = ~np.isnan(ts)
    count = ok.sum(axis=0)
    n = ts.shape[1]
    out = np.full(n, np.nan)
    good = count >= 2
    if not good.any():
        return out
    prev, cur = vs[:-1], vs[1:]
    pair = ok[:-1] & ok[1:]
    step = np.where(cur >= prev, cur - prev, cur)
    delta = np.where(pair, step, 0.0).sum(axis=0)
    cols = np.arange(n)
    first_t, first_v = ts[0], vs[0]
    last_k = np.maximum(count - 1, 0)
    last_t = ts[last_k, cols]
    sampled = last_t - first_t
    with np.errstate(invalid="ignore", divide="ignore"):
        avg = sampled / np.maximum(count - 1, 1)
        to_start = first_t - lo
        to_end = hi - last_t
        to_zero = np.where(delta > 0, sampled * (first_v / np.where(delta > 0, delta, 1.0)), np.inf)
        to_start = np.where((delta > 0) & (first_v >= 0) & (to_zero < to_start), to_zero, to_start)
        thr = 1.1 * avg
        span = (
            sampled
            + np.where(to_start < thr, to_start, avg / 2)
            + np.where(to_end < thr, to_end, avg / 2)
        )
        result = delta * span / sampled
    ok_cols = good & (sampled > 0)
    out[ok_cols] = result[ok_cols]
    return out
