"""One instant cycle's counter columns <-> the counter memory (observer.prometheus.counter_memory).

An instant cycle (observer.prometheus.assemble) has each counter family as a per-GPU series of
totals
keyed by UUID (+ GPU_I_ID), possibly with two rows for a GPU whose old pod's series lingers.
This module lays them out as (family x GPU) totals over the cycle's current GPUs (max over a
GPU's rows, as the range replay's `max by` does), hands them to the memory, and maps the
increases (and the seconds each covers) it answers back onto each series' rows. On a cold start
it seeds the memory with the increases Prometheus reported instead.

Sparse error counters (`values:sparse` answers non-zero totals only): only the families whose
answer came back complete are passed in `sparse`; there a reporting GPU without a non-zero total
is *absent*, not 0 (observer.prometheus.counter_memory decides what that means for its memory).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from itertools import repeat

import numpy as np

from observer.fleet.model import FloatArray
from observer.prometheus.counter_memory import CounterMemory
from observer.prometheus.parse import keys_list
from observer.snapshot.inputs import MetricSeries


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
