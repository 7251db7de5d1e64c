"""Group medians read through a remembered layout equal `np.median` per group, whatever the
order of calls: equal ids reuse the layout, other ids (even one changed id) get their own, and
a caller changing its ids array after a call cannot corrupt a later one."""

from __future__ import annotations

import numpy as np

from detectors.group_layout import KEPT, group_layout
from detectors.signals import PADDED_UP_TO, group_median, group_median_others
from observer.fleet.model import NO_INDEX


def _np_median(v: np.ndarray, g: np.ndarray, n: int) -> np.ndarray:
    out = np.full(n, np.nan)
    for k in range(n):
        x = v[(g == k) & ~np.isnan(v)]
        if x.size:
            out[k] = np.median(x)
    return out


def test_medians_stay_exact_across_interleaved_groupings() -> None:
    rng = np.random.default_rng(3)
    n_rows, n_groups = 3_000, 40
    groupings = [rng.integers(NO_INDEX, n_groups, n_rows).astype(np.int32) for _ in range(5)]
    for cycle in range(30):
        v = rng.normal(size=n_rows)
        v[rng.random(n_rows) < 0.05] = np.nan
        g = groupings[cycle % len(groupings)].copy()  # equal ids, a new array each call
        if cycle % 7 == 3:
            g[rng.integers(0, n_rows)] = (g[0] + 1) % n_groups  # one GPU moved
        assert np.array_equal(group_median(v, g, n_groups), _np_median(v, g, n_groups), True)


def test_equal_ids_share_one_layout_and_other_ids_do_not() -> None:
    g = np.repeat(np.arange(10, dtype=np.int32), 9)
    first = group_layout(g, 10)
    assert group_layout(g.copy(), 10) is first
    moved = g.copy()
    moved[-1] = 0
    assert group_layout(moved, 10) is not first
    assert group_layout(g, 11) is not first  # another group count is another layout


def test_ids_changed_by_the_caller_after_a_call_are_not_remembered() -> None:
    g = np.repeat(np.arange(4, dtype=np.int32), 5)
    v = np.arange(g.size, dtype=np.float64)
    before = group_median(v, g, 4)
    g[:5] = 3  # the caller reuses its array for other ids
    assert np.array_equal(group_median(v, g, 4), _np_median(v, g, 4), True)
    assert not np.array_equal(before, group_median(v, g, 4), True)


def test_layouts_are_read_only_and_old_ones_are_forgotten() -> None:
    g = np.concatenate([np.zeros(PADDED_UP_TO + 1), np.ones(3)]).astype(np.int32)
    layout = group_layout(g, 2)
    for gids, at in layout.blocks:
        assert not gids.flags.writeable and not at.flags.writeable
    for k in range(KEPT):
        group_layout(np.full(7, k, dtype=np.int32), KEPT)
    assert group_layout(g.copy(), 2) is not layout


def _np_median_of_others(v: np.ndarray, g: np.ndarray) -> np.ndarray:
    out = np.full(v.size, np.nan)
    for i in range(v.size):
        if g[i] == NO_INDEX or np.isnan(v[i]):
            continue
        mates = (g == g[i]) & ~np.isnan(v)
        mates[i] = False
        if mates.any():
            out[i] = np.median(v[mates])
    return out


def test_median_of_the_others_on_node_sized_and_wide_groups() -> None:
    """Ties, NaN, infinities, lone rows, rows outside any group; groups of a node (narrow:
    ranked against the sorted group) and wider ones (one argsort of the fleet)."""
    rng = np.random.default_rng(11)
    for trial in range(400):
        n, n_groups = int(rng.integers(1, 120)), int(rng.integers(1, 30))
        if trial % 2:
            n_groups = max(1, n // 8)  # node-sized groups
        g = rng.integers(NO_INDEX, n_groups, n).astype(np.int32)
        v = np.round(rng.normal(size=n) * rng.choice([0.1, 1.0, 100.0]), int(rng.integers(0, 3)))
        v[rng.random(n) < 0.1] = np.nan
        if trial % 10 == 0:
            v[rng.random(n) < 0.2] = np.inf
        got = group_median_others(v, g, n_groups)
        assert np.array_equal(got, _np_median_of_others(v, g), equal_nan=True)
