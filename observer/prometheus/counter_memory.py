"""Counter increases from the collector's own memory of totals, instead of `increase()` queries.

Every Prometheus cycle already brings each GPU's counter totals (the `values:*` groups, and the
error counters' non-zero totals in `values:sparse`). Asking `increase(x[w])` on top reads every
GPU's series of each counter family once more over the window: 7 of the ~29 series reads per
GPU per cycle. A collector running cycles in time order can derive the increase from the totals
it saw instead, and only a cold start (observer.prometheus.memory says when) asks Prometheus.

Semantics, per counter family and GPU key (`UUID` or `UUID/GPU_I_ID`; the pod is ignored: DCGM
counters are device-level, so a new pod's series continues the same total):
- the memory holds the last total and its sample time (the GPU's newest sample time, as the
  snapshot stamps it);
- when a cycle sees a total with a newer sample time, it records the delta `total - previous`,
  or `total` when the total dropped (the counter restarted from 0: PromQL's reset rule), with
  the sample time it ends at and the one it starts from (the previous total's); only non-zero
  deltas are kept (error counters are almost always flat);
- the increase reported at time t is the sum of the deltas ending in (t - window, t]: exact
  (no extrapolation), and an increment is never missed when cycles are further apart than the
  window (it is reported by the next cycle, for `window` seconds of sample time); its *span*
  is the time those deltas cover, `max(window, newest end - earliest start)`, so a rate
  (increase / span) does not inflate after a gap (outages, cycles far apart);
- only totals actually answered are folded in (NaN: keep the old one). Sparse error counters
  (answered only where non-zero): a reporting GPU `absent` from a complete answer is learned as
  0 when its total is unknown or 0, and keeps its total when that is > 0 (absence is no reset;
  such a held total is not forgotten while the GPU reports);
- a GPU whose first total this is has no increase yet (NaN: as `increase()` over fewer than two
  samples), unless that total is 0 (increase 0); one not seen for `keep` seconds (the
  inventory window) is forgotten;
- a cold start seeds the memory with Prometheus' `increase()` answer (all that is known of the
  window before it), logged as covering (s0 - window, s0] of the GPU's sample time s0: for up
  to one window after a cold start the increase covers more than one window, and so does its
  span.

Range replays (observer.prometheus.replay.chunk_grids) step the very same memory through every step
of a chunk, so a
replayed step equals the warm instant cycle at that time. Memory: two floats per family and GPU,
plus the non-zero deltas of the last window (four numbers each).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat

import numpy as np

from observer.fleet.model import FloatArray


def _empty_f() -> FloatArray:
    return np.empty(0, dtype=np.float64)


def _empty_i() -> np.ndarray:
    return np.empty(0, dtype=np.int64)


@dataclass(slots=True)
class CounterMemory:
    """Per (family, GPU key): last total and its sample time; the recent non-zero deltas."""

    families: tuple[str, ...]
    window: float
    keep: float
    """Seconds after its last sample that a GPU's totals are forgotten (>= window)."""
    index: dict[str, int] = field(default_factory=dict)
    """GPU key -> column of `total` and `stamp`."""
    total: FloatArray = field(default_factory=lambda: np.empty((0, 0)))
    stamp: FloatArray = field(default_factory=lambda: np.empty((0, 0)))
    log_col: np.ndarray = field(default_factory=_empty_i)
    """Deltas of the last window: flat `family * capacity + column`, value, the sample time
    the delta ends at (`log_stamp`) and the one it starts from (`log_start`)."""
    log_delta: FloatArray = field(default_factory=_empty_f)
    log_stamp: FloatArray = field(default_factory=_empty_f)
    log_start: FloatArray = field(default_factory=_empty_f)
    last_t: float | None = None

    def __post_init__(self) -> None:
        self.keep = max(self.keep, self.window)
        if self.total.shape[0] != len(self.families):
            self.total = np.full((len(self.families), 0), np.nan)
            self.stamp = np.full((len(self.families), 0), np.nan)

    def warm(self, t: float) -> bool:
        """True when cycles in time order may go on from here (else: a cold start)."""
        return self.last_t is not None and self.last_t <= t <= self.last_t + self.keep

    def reset(self) -> None:
        self.index.clear()
        self.total = np.full((len(self.families), 0), np.nan)
        self.stamp = np.full((len(self.families), 0), np.nan)
        self.log_col, self.log_delta = _empty_i(), _empty_f()
        self.log_stamp, self.log_start = _empty_f(), _empty_f()
        self.last_t = None

    def columns(self, keys: Sequence[str]) -> np.ndarray:
        """The memory columns of these GPU keys (new keys get new columns)."""
        index = self.index
        out = np.fromiter(map(index.get, keys, repeat(-1)), np.int64, len(keys))
        for i in np.flatnonzero(out < 0).tolist():
            out[i] = index.setdefault(keys[i], len(index))
        self._grow(len(index))
        return out

    def _grow(self, n: int) -> None:
        cap = self.total.shape[1]
        if n <= cap:
            return
        new = max(n, cap * 2, 64)
        f = len(self.families)
        total, stamp = np.full((f, new), np.nan), np.full((f, new), np.nan)
        total[:, :cap], stamp[:, :cap] = self.total, self.stamp
        fam, col = np.divmod(self.log_col, max(cap, 1))
        self.log_col = fam * new + col
        self.total, self.stamp = total, stamp

    def seed(
        self, keys: Sequence[str], totals: FloatArray, stamps: FloatArray, t: float,
        increases: FloatArray, absent: np.ndarray | None = None,
    ) -> None:  # fmt: skip
        """A cold start: forget everything, remember these GPUs' totals (families x len(keys),
        NaN: none; keys distinct) and the increases Prometheus reported for them, each logged
        as covering the window before the GPU's sample time (NaN: not reporting). `absent`
        (families x len(keys)): reporting GPUs missing from a complete sparse answer, whose
        total is learned as 0."""
        self.reset()
        cols = self.columns(keys)
        if absent is not None:
            totals = np.where(absent, 0.0, totals)
        st = np.broadcast_to(stamps[None, :], totals.shape)
        valid = ~np.isnan(totals) & ~np.isnan(st)
        self.total[:, cols] = np.where(valid, totals, np.nan)
        self.stamp[:, cols] = np.where(valid, st, np.nan)
        with np.errstate(invalid="ignore"):
            nz = valid & ~np.isnan(increases) & (increases != 0)
        self._log(nz, cols, increases, st - self.window, stamps)
        self.last_t = t

    def observe(
        self, cols: np.ndarray, totals: FloatArray, stamps: FloatArray, t: float,
        absent: np.ndarray | None = None,
    ) -> tuple[FloatArray, FloatArray]:  # fmt: skip
        """A warm cycle at t: fold in the totals (families x len(cols), NaN: none) with the GPUs'
        sample times (NaN: not reporting). `absent` (families x len(cols)): reporting GPUs
        missing from a complete sparse answer (non-zero totals only): learned as 0 when their
        total is unknown (or 0), kept unchanged when it is > 0 (absence is no reset).
        Returns (increase, span) per family and GPU: the sum of the deltas ending in
        (t - window, t] (NaN: unknown; a first total of 0 gives 0, a first non-zero total NaN)
        and the seconds it covers, max(window, newest end - earliest start of those deltas).
        `cols` must be distinct."""
        old_total, old_stamp = self.total[:, cols], self.stamp[:, cols]
        st = stamps[None, :]
        with np.errstate(invalid="ignore"):
            forgotten = old_stamp < t - self.keep
            hold = np.zeros(old_total.shape, dtype=bool)
            if absent is not None:
                absent = absent & ~np.isnan(st)
                hold = absent & (old_total > 0)
                forgotten &= ~hold  # a GPU that reports keeps what it last showed
            old_total[forgotten] = np.nan
            old_stamp[forgotten] = np.nan
            if absent is not None:
                totals = np.where(absent & ~hold, 0.0, totals)
            valid = ~np.isnan(totals) & ~np.isnan(st)
            known = ~np.isnan(old_total)
            moved = valid & ~(st <= old_stamp)  # a newer sample (or the first one)
            delta = np.where(totals < old_total, totals, totals - old_total)
            self._log(moved & known & (delta != 0), cols, delta, old_stamp, stamps)
        self.total[:, cols] = np.where(moved, totals, old_total)
        self.stamp[:, cols] = np.where(moved, st, old_stamp)
        self.last_t = t
        keep = self.log_stamp > t - self.window
        if not keep.all():
            self.log_col, self.log_delta = self.log_col[keep], self.log_delta[keep]
            self.log_stamp, self.log_start = self.log_stamp[keep], self.log_start[keep]
        cap = self.total.shape[1]
        f = len(self.families)
        sums = np.bincount(self.log_col, weights=self.log_delta, minlength=f * cap)
        out: FloatArray = sums.reshape(f, cap)[:, cols].astype(np.float64, copy=False)
        span = np.full(out.shape, self.window)
        if self.log_col.size:
            first = np.full(f * cap, np.inf)
            last = np.full(f * cap, -np.inf)
            np.minimum.at(first, self.log_col, self.log_start)
            np.maximum.at(last, self.log_col, self.log_stamp)
            covered = (last - first).reshape(f, cap)[:, cols]
            span = np.fmax(span, covered)
        out[~((valid & known) | (hold & known))] = np.nan
        out[valid & ~known & (totals == 0)] = 0.0  # a first total of 0: nothing happened yet
        return out, span

    def _log(
        self, mask: np.ndarray, cols: np.ndarray, delta: FloatArray, start: FloatArray,
        end: FloatArray,
    ) -> None:  # fmt: skip
        fam, pos = np.nonzero(mask)
        if fam.size == 0:
            return
        cap = self.total.shape[1]
        self.log_col = np.concatenate([self.log_col, fam * cap + cols[pos]])
        self.log_delta = np.concatenate([self.log_delta, delta[fam, pos]])
        self.log_stamp = np.concatenate([self.log_stamp, end[pos]])
        self.log_start = np.concatenate([self.log_start, start[fam, pos]])

    def compact(self, t: float) -> None:
        """Drop the columns of GPUs forgotten by t (between cycles; columns then change)."""
        if self.total.shape[1] < 1024:
            return
        with np.errstate(invalid="ignore"):
            live: np.ndarray = np.asarray((self.stamp >= t - self.keep).any(axis=0))
        n = len(self.index)
        if int(live[:n].sum()) * 2 > n:
            return
        keys = [k for k, _ in sorted(self.index.items(), key=lambda kv: kv[1])]
        old = np.flatnonzero(live[:n])
        cap = self.total.shape[1]
        fam, col = np.divmod(self.log_col, cap)
        remap = np.full(cap, -1, dtype=np.int64)
        remap[old] = np.arange(old.size)
        ok = remap[col] >= 0
        new_cap = max(old.size, 64)
        self.log_col = fam[ok] * new_cap + remap[col[ok]]
        self.log_delta, self.log_stamp = self.log_delta[ok], self.log_stamp[ok]
        self.log_start = self.log_start[ok]
        total = np.full((len(self.families), new_cap), np.nan)
        stamp = np.full((len(self.families), new_cap), np.nan)
        total[:, : old.size], stamp[:, : old.size] = self.total[:, old], self.stamp[:, old]
        self.total, self.stamp = total, stamp
        self.index = {keys[i]: j for j, i in enumerate(old.tolist())}
