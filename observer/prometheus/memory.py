"""What earlier cycles saw: the GPU inventory and exporter health (`PromMemory`), and counter
totals from which increases are derived (`CounterMemory`, fed by `feed`).

# The inventory memory

What earlier Prometheus cycles saw, so that steady-state cycles skip the costly queries.

Three answers change slowly and cost Prometheus the most per useful byte: the GPUs that
vanished within the inventory window (a range read of every GPU), each exporter's last good
scrape (a subquery over `up`) and the scrape interval (a subquery). A collector running cycles in
time order already saw all three: GPUs and their last sample times come with every `identity`
answer, and so do each node's newest samples. So the collector asks those queries only on a cold
start (first cycle, time going backwards, or a gap longer than the window) and otherwise answers
them from here, in the shapes the assembly expects. Memory: one label dict and one float per GPU
seen within the window, one float per node.

# The counter memory

Counter increases from the collector's own memory of totals, instead of `increase()` queries.

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

# Feeding it from an instant cycle

One instant cycle's counter columns <-> the counter memory (`CounterMemory`, above).

An instant cycle (observer.prometheus.assemble) has each counter family as a per-GPU series of
totals
keyed by UUID (+ GPU_I_ID), possibly with two rows for a GPU whose old pod's series lingers.
This module lays them out as (family x GPU) totals over the cycle's current GPUs (max over a
GPU's rows, as the range replay's `max by` does), hands them to the memory, and maps the
increases (and the seconds each covers) it answers back onto each series' rows. On a cold start
it seeds the memory with the increases Prometheus reported instead.

Sparse error counters (`values:sparse` answers non-zero totals only): only the families whose
answer came back complete are passed in `sparse`; there a reporting GPU without a non-zero total
is *absent*, not 0 (observer.prometheus.memory decides what that means for its memory).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import numpy as np

from observer.fleet.catalog import (
    LABEL_HOSTNAME,
    LABEL_HOSTNAME_NEW,
    LABEL_MIG_INSTANCE,
    LABEL_UUID,
)
from observer.fleet.model import FloatArray
from observer.prometheus.parse import Vector, last_up
from observer.prometheus.plan import IDENTITY_LABELS
from observer.snapshot.inputs import MetricSeries, keys_list


def _key(m: Mapping[str, str]) -> str:
    uuid, mig = m.get(LABEL_UUID, ""), m.get(LABEL_MIG_INSTANCE, "")
    return f"{uuid}/{mig}" if mig else uuid


@dataclass(slots=True)
class PromMemory:
    window: float
    gpus: dict[str, tuple[Mapping[str, str], float]] = field(default_factory=dict)
    """GPU key -> (identity labels of its newest row, newest sample time)."""
    node_last: dict[str, float] = field(default_factory=dict)
    """Node -> newest sample time of any of its GPUs (its exporter's last good scrape)."""
    interval: float | None = None
    last_t: float | None = None

    def warm(self, t: float) -> bool:
        return self.last_t is not None and self.last_t <= t <= self.last_t + self.window

    def remember(self, answers: Mapping[str, Vector | None], t: float, cold: bool) -> None:
        """Fold one cycle's answers in (cycles must come in time order)."""
        if cold:
            self.gpus.clear()
            self.node_last.clear()
            known = {str(r["metric"].get("node", "")) for r in answers.get("up") or []}
            for r in answers.get("vanished") or []:  # last seen sometime in the window
                self.gpus[_key(r["metric"])] = (r["metric"], t - self.window / 2)
            rows = [*(answers.get("identity") or []), *(answers.get("vanished") or [])]
            hosts = {_host(r["metric"]) for r in rows}
            self.node_last.update(last_up(answers.get("up_last") or [], hosts | known))
            interval = answers.get("interval")
            if interval:
                self.interval = float(interval[0]["value"][1])
        for r in answers.get("identity") or []:
            m, seen = r["metric"], float(r["value"][1])
            key = _key(m)
            if key not in self.gpus or seen >= self.gpus[key][1]:
                self.gpus[key] = (m, seen)
            host = _host(m)
            if host and seen > self.node_last.get(host, float("-inf")):
                self.node_last[host] = seen
        for key in [k for k, (_, seen) in self.gpus.items() if seen < t - self.window]:
            del self.gpus[key]
        self.last_t = t

    def answers(self, current: Vector, t: float) -> dict[str, list[dict[str, Any]]]:
        """`vanished`, `up_last` and `interval` as the cold queries would have answered."""
        now = {_key(r["metric"]) for r in current}
        vanished = [
            {"metric": {k: m[k] for k in IDENTITY_LABELS if k in m}, "value": [t, "1"]}
            for key, (m, seen) in self.gpus.items()
            if key not in now and seen >= t - self.window
        ]
        up_last = [
            {"metric": {"node": n}, "value": [t, repr(v)]} for n, v in self.node_last.items()
        ]
        interval = (
            [] if self.interval is None else [{"metric": {}, "value": [t, repr(self.interval)]}]
        )
        return {"vanished": vanished, "up_last": up_last, "interval": interval}


def _host(m: Mapping[str, str]) -> str:
    return str(m.get(LABEL_HOSTNAME) or m.get(LABEL_HOSTNAME_NEW) or "")


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


def feed(
    memory: CounterMemory,
    t: float,
    cold: bool,
    stamp_of: Mapping[str, float],
    series: Mapping[str, MetricSeries],
    sparse: Collection[str] = (),
) -> dict[str, tuple[FloatArray, FloatArray]]:
    """Warm: per family in `series`, the (increase, span) of each of its rows (NaN increase:
    unknown; rows of GPUs not reporting now are NaN). Cold: seeds the memory with the series'
    `increase` (Prometheus' answers) and returns {}. `stamp_of`: GPU key -> newest sample time
    of the GPUs reporting now. `sparse`: the sparse families whose answer is complete (their
    zeros, if filled in, are read as absent)."""
    keys = list(stamp_of)
    n = len(keys)
    stamps = np.fromiter(stamp_of.values(), np.float64, n)
    pos_of = dict(zip(keys, range(n), strict=True))
    fams = memory.families
    totals = np.full((len(fams), n), np.nan)
    seeds = np.full((len(fams), n), np.nan) if cold else totals
    row_pos: dict[str, np.ndarray] = {}
    for f, fam in enumerate(fams):
        s = series.get(fam)
        if s is None:
            continue
        assert s.uuid is not None
        row_keys = keys_list(s.uuid, s.mig_instance)
        pos = np.fromiter(map(pos_of.get, row_keys, repeat(-1)), np.int64, len(row_keys))
        row_pos[fam] = pos
        ok = pos >= 0
        np.fmax.at(totals[f], pos[ok], s.value[ok])
        if cold and s.increase is not None:
            np.fmax.at(seeds[f], pos[ok], s.increase[ok])
    absent = None
    if sparse:
        absent = np.zeros(totals.shape, dtype=bool)
        for f, fam in enumerate(fams):
            if fam in sparse:
                with np.errstate(invalid="ignore"):
                    absent[f] = ~(totals[f] > 0)  # NaN or a filled-in 0
                totals[f] = np.where(absent[f], np.nan, totals[f])
    if cold:
        memory.seed(keys, totals, stamps, t, seeds, absent)
        return {}
    inc, span = memory.observe(memory.columns(keys), totals, stamps, t, absent)
    out: dict[str, tuple[FloatArray, FloatArray]] = {}
    for fam, pos in row_pos.items():
        f = fams.index(fam)
        at = np.maximum(pos, 0)
        row, row_span = inc[f][at], span[f][at]
        row[pos < 0] = np.nan
        out[fam] = (row, row_span)
    return out
