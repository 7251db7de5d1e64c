"""Median and median absolute deviation per peer group, from one grouped sort.

The anomaly detector normalises ten gauges per cycle by their peers' median and MAD. Done as two
`group_median` calls, the MAD sorts the fleet a second time (|x - median|, ~3 ms per gauge at
100k GPUs). But within a group sorted by value, the distances to the median are two sorted runs —
below the median, read backwards, and from it upwards — and the MAD is the middle of their
union: a k-th smallest of two sorted lists, found for every group at once by bisection in
log2(largest group) vectorised steps. Same numbers as the two sorts: m - v is |v - m| exactly
for v <= m (IEEE subtraction is antisymmetric).

`groups_median_mad` does it for several gauges that share their peer groups (the anomaly
features: ten gauges, one grouping) from `detectors.signals.sorted_groups`: each group's values
sorted along a padded row, every gauge at once, instead of an argsort of the fleet per gauge.
A group's sorted values are all the median and the MAD read, so the numbers are the same.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from detectors.signals import grouped_sorted, sorted_groups, sorted_rows_median
from observer.fleet.model import FloatArray

Ints = npt.NDArray[np.signedinteger[Any]]


def group_median_mad(
    values: FloatArray, groups: Ints, n_groups: int
) -> tuple[FloatArray, FloatArray]:
    """Per group id: the median of `values` and the median of |values - that median| (NaN and
    NO_INDEX rows ignored; NaN for a group without values), as `group_median` gives them."""
    med = np.full(n_groups, np.nan)
    mad = np.full(n_groups, np.nan)
    grouped = grouped_sorted(values, groups, n_groups)
    if grouped is None:
        return med, mad
    vs, gs, counts, starts = grouped
    has = np.flatnonzero(counts > 0)
    c, s = counts[has], starts[has]
    m = (vs[s + (c - 1) // 2] + vs[s + c // 2]) / 2.0
    med[has] = m
    below = np.bincount(gs[vs < np.repeat(med, counts)], minlength=n_groups)[has]
    lo = _kth(vs, s, below, c - below, m, (c - 1) // 2)
    hi = _kth(vs, s, below, c - below, m, c // 2)
    mad[has] = (lo + hi) / 2.0
    return med, mad


def groups_median_mad(
    values: FloatArray, groups: Ints, n_groups: int
) -> tuple[FloatArray, FloatArray]:
    """`group_median_mad` of each row of `values` (gauges x GPUs) over the same groups:
    (gauges, n_groups) medians and MADs, equal to calling it per gauge."""
    n_vals = values.shape[0]
    med = np.full((n_vals, n_groups), np.nan)
    mad = np.full((n_vals, n_groups), np.nan)
    for gids, block in sorted_groups(values, groups, n_groups):
        m, d = _sorted_rows_median_mad(block.reshape(-1, block.shape[-1]))
        med[:, gids] = m.reshape(n_vals, gids.size)
        mad[:, gids] = d.reshape(n_vals, gids.size)
    return med, mad


def _sorted_rows_median_mad(block: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Median and MAD of each row of `block`, sorted along rows with NaN last (NaN if empty)."""
    w = block.shape[1]
    med, c = sorted_rows_median(block)
    mad = np.full(block.shape[0], np.nan)
    has = np.flatnonzero(c > 0)
    c, m = c[has], med[has]
    below = (block[has] < m[:, None]).sum(axis=1)
    lo = _kth(block.reshape(-1), has * w, below, c - below, m, (c - 1) // 2)
    hi = _kth(block.reshape(-1), has * w, below, c - below, m, c // 2)
    mad[has] = (lo + hi) / 2.0
    return med, mad


def _kth(vs: FloatArray, s: Ints, a: Ints, b: Ints, m: FloatArray, k: Ints) -> FloatArray:
    """Per group, the k-th smallest (from 0) of A = m - vs[s + a - 1 - i] (i < a) and
    B = vs[s + a + j] - m (j < b), both ascending."""

    last = vs.size - 1

    def take_a(i: Ints) -> FloatArray:
        out: FloatArray = m - vs[_within(s + a - 1 - i, last)]
        return out

    def take_b(j: Ints) -> FloatArray:
        out: FloatArray = vs[_within(s + a + j, last)] - m
        return out

    # t = how many of the k + 1 smallest come from A
    lo = np.maximum(0, k + 1 - b)
    hi = np.minimum(a, k + 1)
    while True:
        open_ = lo < hi
        if not open_.any():
            break
        t = (lo + hi) // 2
        more_a = open_ & (take_a(t) < take_b(k - t))  # A's next is below B's last taken
        lo = np.where(more_a, t + 1, lo)
        hi = np.where(open_ & ~more_a, t, hi)
    last_a = np.where(lo > 0, take_a(lo - 1), -np.inf)
    last_b = np.where(k - lo >= 0, take_b(k - lo), -np.inf)
    out: FloatArray = np.maximum(last_a, last_b)
    return out


def _within(at: Ints, last: int) -> Ints:
    """`np.clip(at, 0, last)` by two ufuncs: np.clip's Python wrapper (dtype limits looked up on
    every call) cost ~15 us, ~100 calls a cycle (~1.5 ms of a 1k-GPU anomaly cycle's ~8)."""
    out: Ints = np.minimum(np.maximum(at, 0), last)
    return out
