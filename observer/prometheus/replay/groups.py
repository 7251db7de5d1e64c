"""Grouping helpers for raw-sample grids: factorise label values, reduce rows by group.

PromQL's `max by (...)` / `sum by (...)` over a (series x step) grid become one sort and one
`ufunc.reduceat` per chunk; NaN stands for "no sample" and is skipped, as PromQL skips absent
series (a group with no sample at a step stays NaN).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from observer.fleet.model import FloatArray


def codes(values: Sequence[Hashable]) -> tuple[np.ndarray, list[Hashable]]:
    """(code per value, distinct values in first-seen order)."""
    distinct = list(dict.fromkeys(values))  # first-seen order, hashed in C
    index = {v: i for i, v in enumerate(distinct)}
    out = np.fromiter(map(index.__getitem__, values), np.int64, len(values))
    return out, distinct


def reduce_rows(grid: FloatArray, group: np.ndarray, n_groups: int, how: str) -> FloatArray:
    """(n_groups x steps): `max` or `sum` of the rows of each group, NaN-skipping."""
    out = np.full((n_groups, grid.shape[1]), np.nan)
    if grid.shape[0] == 0:
        return out
    if np.bincount(group, minlength=1).max() <= 1:  # one row per group: no reduction
        out[group] = grid
        return out
    order = np.argsort(group, kind="stable")
    g = group[order]
    heads = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    rows = grid[order]
    if how == "max":
        out[g[heads]] = np.fmax.reduceat(rows, heads, axis=0)
        return out
    present = ~np.isnan(rows)
    total = np.add.reduceat(np.where(present, rows, 0.0), heads, axis=0)
    seen = np.logical_or.reduceat(present, heads, axis=0)
    out[g[heads]] = np.where(seen, total, np.nan)
    return out
