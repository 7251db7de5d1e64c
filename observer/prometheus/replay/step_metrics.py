"""A replay chunk's metric answers for every step at once, as the builder's `MetricGrid`s.

observer.prometheus.replay.chunk_grids leaves each family as a (GPU key x step) grid. What an
instant cycle would hand the builder at a step (observer.prometheus.assemble: values, sparse
error counters as 0 for reporting GPUs, counter increases joined on the GPU, XID counts) is
decided here for all steps of the chunk in whole-array operations, as (step x family x key)
cubes; a step then only slices its layer (observer.prometheus.replay.steps). The rules, per step:

- gauges: the family is answered where any GPU has a value;
- counters (unless their fetch failed): the value where the GPU has one (0 for reporting GPUs
  when the sparse answer is complete), joined with the increase and its span; a family with
  increases but no value keeps the increases alone, one with values but no increase has no
  increase column;
- XID counts: each code answered where any GPU counts it; the total always, 0 for reporting GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from observer.fleet.catalog import XID_COUNT_METRIC
from observer.fleet.model import BoolArray, FloatArray
from observer.prometheus.plan import counter_families
from observer.prometheus.replay.chunk_grids import Identity
from observer.snapshot.metric_grid import MetricGrid

COUNTERS = frozenset(counter_families())


@dataclass(frozen=True, slots=True)
class StepMetrics:
    """(step x family x key) cubes of one chunk; `at(k, key_row)` is step k's grid."""

    names: tuple[str, ...]
    given: BoolArray
    """(steps x families)."""
    present: BoolArray
    value: FloatArray
    increase: FloatArray
    has_increase: BoolArray
    """(steps x families)."""
    span: FloatArray
    has_span: BoolArray
    """(families,)."""
    window: FloatArray
    """(steps x families)."""
    stamp: FloatArray
    """(steps x keys): the GPU's newest sample time (NaN: not current)."""

    def at(self, k: int, key_row: np.ndarray) -> MetricGrid:
        """Step k's grid, entries keyed by identity row (`key_row`: per key, -1: no row)."""
        return MetricGrid(
            names=self.names, given=self.given[k], row=key_row, timestamp=self.stamp[k],
            present=self.present[k] & (key_row >= 0)[None, :], value=self.value[k],
            increase=self.increase[k], has_increase=self.has_increase[k], span=self.span[k],
            has_span=self.has_span, window=self.window[k],
        )  # fmt: skip


def step_metrics(
    ident: Identity,
    values: dict[str, FloatArray],
    increases: dict[str, FloatArray],
    spans: dict[str, FloatArray],
    xid: dict[str, FloatArray] | None,
    missing: frozenset[str],
    complete: frozenset[str],
    window: float,
) -> StepMetrics:
    """The cubes from the chunk's (key x step) grids. `complete`: sparse counter families whose
    answer is complete (a reporting GPU without a total has 0); `missing`: families whose fetch
    failed (no answer at all)."""
    stamp = np.ascontiguousarray(ident.key_stamp.T)
    n_steps, n_keys = stamp.shape
    current = ~np.isnan(stamp)
    gauges = [f for f in values if f not in COUNTERS]
    counters = [f for f in COUNTERS if f not in missing]
    xids = [n for n in (xid or {}) if n not in set(gauges) | set(counters)]
    names = (*gauges, *counters, *xids)
    shape = (n_steps, len(names), n_keys)
    value = np.full(shape, np.nan)
    increase = np.full(shape, np.nan)
    span = np.full(shape, np.nan)
    has_span = np.zeros(len(names), dtype=bool)
    for f, name in enumerate(names):
        grid = (xid or {}).get(name) if f >= len(gauges) + len(counters) else values.get(name)
        if grid is not None:
            value[:, f, :] = grid.T
        inc = increases.get(name) if name in COUNTERS else None
        if inc is not None:
            increase[:, f, :] = inc.T
        sp = spans.get(name) if name in COUNTERS else None
        if sp is not None:
            span[:, f, :] = sp.T
            has_span[f] = True
    has = ~np.isnan(value)
    value_given = has.any(axis=2)
    for f, name in enumerate(names):
        if name in complete or name == XID_COUNT_METRIC:  # reporting GPUs without one: 0
            fill = current & ~has[:, f, :]
            value[:, f, :][fill] = 0.0
            has[:, f, :] |= current
            value_given[:, f] = True
    has_inc = ~np.isnan(increase)
    inc_given = has_inc.any(axis=2)
    counter = np.zeros(len(names), dtype=bool)
    counter[len(gauges) : len(gauges) + len(counters)] = True
    only_inc = counter[None, :] & ~value_given & inc_given  # increases without a value
    present = np.where(only_inc[:, :, None], has_inc, has)
    value[only_inc] = np.nan
    with_inc = counter[None, :] & inc_given
    given = value_given | with_inc
    return StepMetrics(
        names=names, given=given, present=present, value=value, increase=increase,
        has_increase=with_inc, span=span, has_span=has_span,
        window=np.where(with_inc, window, 0.0), stamp=stamp,
    )  # fmt: skip
