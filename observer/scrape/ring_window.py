"""A bounded rolling window of samples per series, in numpy ring buffers.

The direct-scrape collector has no Prometheus to ask for `increase()`, so it keeps the last
`capacity` samples of every counter series itself and computes the same reset-aware,
extrapolated increase PromQL does (observer.promql, range closed on both ends as in Prometheus
2.x). Memory is fixed per series: two float64 rings (time, value) of `capacity`
slots, i.e. 16 * capacity bytes; series not seen for `retention` seconds give their column back.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from observer.fleet.model import FloatArray
from observer.promql import PROMETHEUS_2, increase_columns


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
        out[known] = increase_columns(
            self._t[:, cols], self._v[:, cols], now - window, now, PROMETHEUS_2
        )
        return out
