"""One value sort shared by several groupings gives the medians each grouping gives alone.

The straggler groups the same activity by job and by node-mates; `value_order` sorts it once.
Checked against plain per-group `np.median` (ties, NaN, rows outside any group, one-row groups),
and with a deliberately different order among ties than a fresh sort's.
"""

from __future__ import annotations

import numpy as np

from detectors.signals import group_median, group_median_others, value_order
from observer.fleet.model import NO_INDEX


def _medians(v: np.ndarray, g: np.ndarray, n: int) -> np.ndarray:
    out = np.full(n, np.nan)
    for k in range(n):
        x = v[(g == k) & ~np.isnan(v)]
        if x.size:
            out[k] = np.median(x)
    return out


def _others(v: np.ndarray, g: np.ndarray) -> np.ndarray:
    out = np.full(v.size, np.nan)
    for i in range(v.size):
        if g[i] == NO_INDEX or np.isnan(v[i]):
            continue
        mates = (g == g[i]) & ~np.isnan(v)
        mates[i] = False
        if mates.any():
            out[i] = np.median(v[mates])
    return out


def test_shared_order_gives_each_groupings_medians() -> None:
    rng = np.random.default_rng(2025)
    for _ in range(600):
        n, groups = int(rng.integers(1, 50)), int(rng.integers(1, 7))
        v = np.round(rng.normal(size=n) * rng.choice([0.1, 1.0, 10.0]), int(rng.integers(0, 2)))
        v[rng.random(n) < 0.15] = np.nan
        order = value_order(v)
        reversed_ties = np.lexsort((-np.arange(n), v))  # ties in the opposite order
        for shared in (order, reversed_ties):
            for _ in range(2):  # two groupings of the same values, one sort
                g = rng.integers(NO_INDEX, groups, n).astype(np.int32)
                want = _medians(v, g, groups)
                assert np.array_equal(group_median(v, g, groups, shared), want, equal_nan=True)
                assert np.array_equal(group_median(v, g, groups), want, equal_nan=True)
                got = group_median_others(v, g, groups, shared)
                assert np.array_equal(got, _others(v, g), equal_nan=True)


def test_shared_order_at_fleet_scale_equals_fresh_sorts() -> None:
    rng = np.random.default_rng(4)
    v = np.round(rng.normal(0.9, 0.05, 100_000), 2)  # many ties, as exporter readings have
    v[rng.random(v.size) < 0.01] = np.nan
    job = rng.integers(NO_INDEX, 780, v.size).astype(np.int32)
    mates = rng.integers(NO_INDEX, 12_500, v.size).astype(np.int32)
    order = value_order(v)
    for g, n in ((job, 780), (mates, 12_500)):
        assert np.array_equal(group_median(v, g, n, order), group_median(v, g, n), equal_nan=True)
        shared = group_median_others(v, g, n, order)
        assert np.array_equal(shared, group_median_others(v, g, n), equal_nan=True)
