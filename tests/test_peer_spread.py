"""Peer median and MAD from one grouped sort equal the two-sort computation they replace."""

from __future__ import annotations

import numpy as np

from detectors.peer_spread import group_median_mad, groups_median_mad
from detectors.signals import PADDED_UP_TO, group_median
from observer.fleet.model import NO_INDEX


def _two_sorts(v: np.ndarray, g: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    med = group_median(v, g, n)
    at = np.where(g != NO_INDEX, med[np.clip(g, 0, None)], np.nan)
    return med, group_median(np.abs(v - at), g, n)


def test_equal_to_median_then_median_of_distances_on_awkward_groups() -> None:
    """Ties, constant groups, NaN, rows outside any group, empty and one-row groups."""
    rng = np.random.default_rng(25)
    for _ in range(2_000):
        n, groups = int(rng.integers(1, 60)), int(rng.integers(1, 8))
        g = rng.integers(NO_INDEX, groups, n).astype(np.int32)
        v = np.round(rng.normal(size=n) * rng.choice([0.1, 1.0, 100.0]), int(rng.integers(0, 3)))
        v[rng.random(n) < 0.1] = np.nan
        if rng.random() < 0.2:
            v[:] = 5.0
        med, mad = group_median_mad(v, g, groups)
        want_med, want_mad = _two_sorts(v, g, groups)
        assert np.array_equal(med, want_med, equal_nan=True)
        assert np.array_equal(mad, want_mad, equal_nan=True)


def test_equal_at_fleet_scale_with_one_large_group() -> None:
    rng = np.random.default_rng(7)
    g = np.concatenate([rng.integers(0, 1_599, 80_000), np.full(20_000, 1_599)]).astype(np.int32)
    v = rng.normal(0.9, 0.05, g.size)
    med, mad = group_median_mad(v, g, 1_600)
    want_med, want_mad = _two_sorts(v, g, 1_600)
    assert np.array_equal(med, want_med) and np.array_equal(mad, want_mad)


def test_several_gauges_at_once_equal_one_at_a_time() -> None:
    """Gauges sharing their groups, as the anomaly features: groups of every size class (one
    row to thousands), NaN in some gauges only, a gauge all NaN, rows outside any group."""
    rng = np.random.default_rng(26)
    for _ in range(300):
        groups = int(rng.integers(1, 12))
        sizes = rng.choice([1, 2, 7, 8, 9, 31, 128, 300, 3_000], size=groups)
        g = np.repeat(np.arange(groups, dtype=np.int32), sizes)
        g[rng.random(g.size) < 0.05] = NO_INDEX
        g = rng.permutation(g)
        vals = np.round(rng.normal(size=(4, g.size)) * 10, int(rng.integers(0, 3)))
        vals[1][rng.random(g.size) < 0.3] = np.nan
        vals[2][:] = np.nan if rng.random() < 0.3 else 3.0
        med, mad = groups_median_mad(vals, g, groups + 1)  # the last group id has no row
        for k in range(4):
            want_med, want_mad = group_median_mad(vals[k], g, groups + 1)
            assert np.array_equal(med[k], want_med, equal_nan=True)
            assert np.array_equal(mad[k], want_mad, equal_nan=True)


def test_group_median_equals_numpy_per_group_at_every_size() -> None:
    """Groups sorted as padded rows (up to PADDED_UP_TO) and one by one (larger), NaN skipped,
    empty groups NaN, rows outside any group ignored."""
    rng = np.random.default_rng(27)
    for _ in range(40):
        groups = int(rng.integers(1, 6))
        sizes = rng.choice([0, 1, 2, 8, 9, 100, PADDED_UP_TO, PADDED_UP_TO + 1, 9_000], groups)
        g = rng.permutation(np.repeat(np.arange(groups, dtype=np.int32), sizes))
        g[rng.random(g.size) < 0.02] = NO_INDEX
        v = np.round(rng.normal(size=g.size) * 50, int(rng.integers(0, 3)))
        v[rng.random(g.size) < 0.1] = np.nan
        got = group_median(v, g, groups)
        for k in range(groups):
            mine = v[(g == k) & ~np.isnan(v)]
            assert np.array_equal(got[k], np.median(mine) if mine.size else np.nan, equal_nan=True)
