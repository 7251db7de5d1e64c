"""Peer median and MAD from one grouped sort equal the two-sort computation they replace."""

from __future__ import annotations

import numpy as np

from detectors.peer_spread import group_median_mad
from detectors.signals import group_median
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
