"""Many metrics' series at once, as (family x entry) grids: what a replay step hands the builder.

A range replay knows every family's newest value for every GPU key as one grid per step
(observer.prometheus.replay.step_metrics). Handing the builder one `MetricSeries` per family
costs a few dozen small numpy calls per family and step; `MetricGrid` holds them all, keyed by
identity row like `MetricSeries.row`, and the builder places every family in a few whole-grid
operations. The result is by definition what the per-family series (`MetricGrid.series()`)
give: the builder falls back to them whenever the fast placement's conditions do not hold
(two entries on one GPU, or two names folding into one catalog name).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from observer.fleet.model import BoolArray, FloatArray, IntArray
from observer.snapshot.inputs import MetricSeries


@dataclass(frozen=True, slots=True)
class MetricGrid:
    """Families (rows) x entries (columns). Entry j is one series per family, keyed by the
    identity row `row[j]` (-1: none) with sample time `timestamp[j]`; `present[f, j]`: family f
    has that series. `given[f]`: family f is part of the answer at all (a family given with no
    present entry still gets its column). Counter families carry `increase` (`has_increase[f]`)
    over `window[f]` seconds and, with `has_span[f]`, the seconds each increase covers."""

    names: tuple[str, ...]
    given: BoolArray
    row: IntArray
    timestamp: FloatArray
    present: BoolArray
    value: FloatArray
    increase: FloatArray
    has_increase: BoolArray
    span: FloatArray
    has_span: BoolArray
    window: FloatArray

    def series(self) -> dict[str, MetricSeries]:
        """The same data as one `MetricSeries` per given family (the builder's general path)."""
        out: dict[str, MetricSeries] = {}
        for f in np.flatnonzero(self.given).tolist():
            sel = self.present[f]
            inc = bool(self.has_increase[f])
            out[self.names[f]] = MetricSeries(
                self.value[f][sel], self.timestamp[sel], row=self.row[sel],
                increase=self.increase[f][sel] if inc else None,
                window_seconds=float(self.window[f]),
                span=self.span[f][sel] if inc and self.has_span[f] else None,
            )  # fmt: skip
        return out


@dataclass(frozen=True, slots=True)
class PlacedGrid:
    """A grid's families placed on GPU positions (NaN where a GPU has no entry)."""

    value: FloatArray
    timestamp: FloatArray
    increase: FloatArray
    span: FloatArray
    unknown: IntArray
    """Per family, present entries whose row is no GPU."""


def place(grid: MetricGrid, row_to_gpu: IntArray, gpus: int) -> PlacedGrid | None:
    """Every family's columns over `gpus` GPU positions (`row_to_gpu`: identity row -> GPU),
    or None when two entries land on one GPU (then the newest-wins rule of the per-family path
    decides)."""
    ok_row = (grid.row >= 0) & (grid.row < row_to_gpu.shape[0])
    pos = np.full(grid.row.shape[0], -1, dtype=np.int64)
    pos[ok_row] = row_to_gpu[grid.row[ok_row]]
    mapped = pos >= 0
    if np.bincount(pos[mapped], minlength=gpus).max(initial=0) > 1:
        return None
    entry = np.full(gpus, -1, dtype=np.int64)
    entry[pos[mapped]] = np.flatnonzero(mapped)
    has = entry >= 0
    at = np.maximum(entry, 0)
    here = grid.present[:, at] & has[None, :]
    nan = np.nan
    value = np.where(here, grid.value[:, at], nan)
    stamp = np.where(here, grid.timestamp[at][None, :], nan)
    increase = np.where(here, grid.increase[:, at], nan)
    span = np.where(here, grid.span[:, at], nan)
    unknown = np.count_nonzero(grid.present & ~mapped[None, :], axis=1)
    return PlacedGrid(value, stamp, increase, span, unknown)
