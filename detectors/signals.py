"""Shared, vectorised readings of a snapshot: fresh values, counter rates, telemetry health.

Every detector needs the same few judgements — is this sample recent enough to believe, how fast
did that counter grow, which nodes are actually reporting — and they must agree, or one detector
reads an exporter outage as a lost GPU while another calls it a monitoring gap. They live here,
as pure functions over columns (no loop over GPUs).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from detectors.group_layout import PADDED_UP_TO as PADDED_UP_TO  # re-exported
from detectors.group_layout import group_layout
from detectors.identity_memo import IdentityMemo, read_only
from observer.fleet.catalog import canonical_name
from observer.fleet.model import (
    NO_INDEX,
    BoolArray,
    FleetSnapshot,
    FloatArray,
    IntArray,
    MetricColumn,
)

F32Array = npt.NDArray[np.float32]
AnyFloat = npt.NDArray[np.floating[Any]]

DEFAULT_SCRAPE_INTERVAL = 30.0
"""dcgm-exporter's default collect interval; used only when the snapshot does not say."""

UTIL = "DCGM_FI_DEV_GPU_UTIL"
SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"
POWER = "DCGM_FI_DEV_POWER_USAGE"
GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
MEM_TEMP = "DCGM_FI_DEV_MEMORY_TEMP"
GR_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
TENSOR_ACTIVE = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
DRAM_ACTIVE = "DCGM_FI_PROF_DRAM_ACTIVE"
NVLINK_BW = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"
THROTTLE = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
XID = "DCGM_FI_DEV_XID_ERRORS"


def column(snapshot: FleetSnapshot, name: str) -> MetricColumn | None:
    """A metric column by catalog name or alias (collectors store catalog names)."""
    col = snapshot.metrics.get(name)
    if col is None:
        canon = canonical_name(name)
        col = snapshot.metrics.get(canon)
        if col is None:
            metrics = snapshot.metrics
            return _BY_CANONICAL.get((metrics,), lambda: _by_canonical(metrics)).get(canon)
    return col


def _by_canonical(metrics: Mapping[str, MetricColumn]) -> dict[str, MetricColumn]:
    """Each collected column by its catalog name, the first of its aliases in the snapshot."""
    out: dict[str, MetricColumn] = {}
    for key, c in metrics.items():
        out.setdefault(canonical_name(key), c)
    return out


_BY_CANONICAL: IdentityMemo[dict[str, MetricColumn]] = IdentityMemo()
"""The last snapshot's columns by catalog name: a metric that is not collected is looked up
by every alias several times a cycle (gpu_memory alone asks for ten)."""


def scrape_interval(snapshot: FleetSnapshot) -> float:
    t = snapshot.telemetry
    if t is not None and t.scrape_interval > 0:
        return float(t.scrape_interval)
    return DEFAULT_SCRAPE_INTERVAL


def fresh(col: MetricColumn, now: float, max_age: float) -> BoolArray:
    """Samples recent enough to judge the present by (absent or old samples are not)."""
    with np.errstate(invalid="ignore"):
        ok: BoolArray = (now - col.timestamp) <= max_age
    return ok & ~np.isnan(col.value)


def value(snapshot: FleetSnapshot, name: str, now: float, max_age: float) -> FloatArray | None:
    """The latest value where it is fresh, NaN elsewhere; None when the metric is not collected.
    Read-only: the same reading is handed to every detector asking for it of this snapshot
    (five detectors read utilisation at the same age each cycle)."""
    metrics = snapshot.metrics
    known = _READINGS.get((metrics,), dict)
    key = (name, now, max_age)
    if key in known:
        return known[key]
    col = column(snapshot, name)
    out = None if col is None else read_only(np.where(fresh(col, now, max_age), col.value, np.nan))
    known[key] = out
    return out


_READINGS: IdentityMemo[dict[tuple[str, float, float], FloatArray | None]] = IdentityMemo()
"""The readings `value` gave for the last snapshot's metrics, by (name, now, max age)."""


def increase(snapshot: FleetSnapshot, name: str, now: float, max_age: float) -> FloatArray | None:
    """Reset-aware counter increase over the collector's window (never negative), NaN if stale.

    Collectors compute the increase reset-aware (like PromQL `increase()`); a negative number can
    only come from a reset a collector missed, and a reset is not an error, so it reads as 0.
    """
    col = column(snapshot, name)
    if col is None or col.increase is None:
        return None
    inc = np.where(fresh(col, now, max_age), col.increase, np.nan)
    with np.errstate(invalid="ignore"):
        return np.where(inc < 0, 0.0, inc)


def rate(snapshot: FleetSnapshot, name: str, now: float, max_age: float) -> FloatArray | None:
    """Per-second rate of a counter (NaN where unknown): its increase divided by the seconds
    it covers, per GPU (`MetricColumn.span`; the collector's window where none is given)."""
    col = column(snapshot, name)
    inc = increase(snapshot, name, now, max_age)
    if col is None or inc is None or col.window_seconds <= 0:
        return None
    return inc / col.seconds()


def gpu_last_sample(snapshot: FleetSnapshot) -> FloatArray:
    """Newest sample time per GPU over every collected metric (NaN: never sampled)."""
    n = len(snapshot.gpus)
    out = np.full(n, np.nan)
    for col in snapshot.metrics.values():
        if col.timestamp.shape[0] == n:
            out = np.fmax(out, col.timestamp)
    return out


def per_node_max(values: FloatArray, node_index: IntArray, n_nodes: int) -> FloatArray:
    """Max over each node's GPUs, ignoring NaN (NaN for nodes without a value)."""
    out = np.full(n_nodes, np.nan)
    ok = (node_index >= 0) & ~np.isnan(values)
    if np.any(ok):
        np.fmax.at(out, node_index[ok], values[ok])
    return out


def _newest_samples(snapshot: FleetSnapshot) -> tuple[FloatArray, FloatArray, BoolArray]:
    """Newest sample time per GPU and per node (NaN: never sampled), and which nodes have
    GPUs: what `telemetry_view` reads of a snapshot whatever its thresholds."""
    g = snapshot.gpus
    n_nodes = len(snapshot.nodes)
    last = gpu_last_sample(snapshot)
    node_last = per_node_max(last, g.node_index, n_nodes)
    t = snapshot.telemetry
    if t is not None and t.node_last_sample.shape[0] == n_nodes:
        node_last = np.fmax(node_last, t.node_last_sample)
    has_gpus = np.zeros(n_nodes, dtype=bool)
    has_gpus[g.node_index[g.node_index >= 0]] = True
    return read_only(last), read_only(node_last), read_only(has_gpus)


_NEWEST: IdentityMemo[tuple[FloatArray, FloatArray, BoolArray]] = IdentityMemo()
"""The last snapshot's newest samples: gpu_lost and monitoring_gap both read them (a pass over
every metric column each)."""


@dataclass(frozen=True, slots=True)
class TelemetryView:
    """Who is reporting right now, derived once per detector call from the snapshot."""

    interval: float
    gpu_age: FloatArray
    """Seconds since each GPU's newest sample (inf when never sampled)."""
    node_age: FloatArray
    """Seconds since each node's newest sample (inf when never sampled)."""
    node_has_gpus: BoolArray
    node_up: BoolArray
    """The node's exporter is reporting: fresh samples and not marked down."""
    fleet_gap: bool
    """The source failed, or too large a share of GPU nodes is silent: judge nothing per GPU."""
    fleet_silent_fraction: float


def telemetry_view(
    snapshot: FleetSnapshot, now: float, stale_after: float, fleet_fraction: float
) -> TelemetryView:
    """Freshness per GPU and node. `stale_after` is in scrape intervals."""
    interval = scrape_interval(snapshot)
    n_nodes = len(snapshot.nodes)
    sources = (snapshot.metrics, snapshot.gpus, snapshot.nodes, snapshot.telemetry)
    last, node_last, has_gpus = _NEWEST.get(sources, lambda: _newest_samples(snapshot))
    gpu_age = np.where(np.isnan(last), np.inf, now - last)
    node_age = np.where(np.isnan(node_last), np.inf, now - node_last)
    t = snapshot.telemetry
    node_up = node_age <= stale_after * interval
    if t is not None and t.node_up.shape[0] == n_nodes:
        node_up &= t.node_up
    watched = int(has_gpus.sum())
    silent = int((has_gpus & ~node_up).sum())
    frac = silent / watched if watched else 0.0
    source_ok = t.source_ok if t is not None else True
    gap = (not source_ok) or (watched > 0 and frac >= fleet_fraction)
    return TelemetryView(interval, gpu_age, node_age, has_gpus, node_up, gap, frac)


def by_group_then_value(values: AnyFloat, groups: IntArray, n_groups: int) -> npt.NDArray[np.intp]:
    """The order of `np.lexsort((values, groups))`, in a third of its time at 100k rows: one
    sort of the values, then a stable radix sort of the group ids (16-bit when they fit)."""
    by_value = np.argsort(values)
    keys = groups[by_value]
    if n_groups <= np.iinfo(np.uint16).max:
        keys = keys.astype(np.uint16)
    order: npt.NDArray[np.intp] = by_value[np.argsort(keys, kind="stable")]
    return order


def grouped_sorted(
    values: FloatArray, groups: npt.NDArray[np.signedinteger[Any]], n_groups: int
) -> tuple[FloatArray, npt.NDArray[np.intp], npt.NDArray[np.intp], npt.NDArray[np.intp]] | None:
    """(values sorted by group then value, their group ids, count and start per group id),
    NaN and NO_INDEX rows left out; None when no row is left."""
    ok = (groups != NO_INDEX) & ~np.isnan(values)
    if not np.any(ok):
        return None
    g = groups[ok]
    v = values[ok]
    order = by_group_then_value(v, g, n_groups)
    gs = g[order].astype(np.intp)
    counts = np.bincount(gs, minlength=n_groups)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.intp)
    return v[order], gs, counts, starts


def sorted_groups(
    values: FloatArray, groups: npt.NDArray[np.signedinteger[Any]], n_groups: int
) -> Iterator[tuple[npt.NDArray[np.intp], FloatArray]]:
    """Each group's values sorted, for gauges (rows of `values`) that share their groups:
    (group ids, block of shape (gauges, len(ids), width)) with each group's values along the
    last axis, NaN and padding (NaN) last; NO_INDEX rows left out, empty groups not given.

    numpy sorts values far faster than it argsorts them (~1.5 against ~6 ms for 100k floats),
    and a median reads nothing but a group's sorted values: the rows are laid out one padded
    row per group (detectors.group_layout, remembered while the group ids stay the same) and
    sorted along the rows. The group ids given are read-only (shared between calls)."""
    layout = group_layout(groups, n_groups)
    if not layout.blocks:
        return
    n_vals = values.shape[0]
    padded = np.concatenate((values, np.full((n_vals, 1), np.nan)), axis=1)  # column n: NaN
    for gids, at in layout.blocks:
        yield gids, np.sort(padded[:, at], axis=-1)


def sorted_rows_median(block: FloatArray) -> tuple[FloatArray, npt.NDArray[np.intp]]:
    """(median of each row of `block`, sorted along rows with NaN last (NaN if empty), and
    how many values each row has)."""
    n_rows, w = block.shape
    c = w - np.count_nonzero(np.isnan(block), axis=1)
    med = np.full(n_rows, np.nan)
    has = np.flatnonzero(c > 0)
    ch = c[has]
    med[has] = (block[has, (ch - 1) // 2] + block[has, ch // 2]) / 2.0
    return med, c


def group_median(values: FloatArray, groups: IntArray, n_groups: int) -> FloatArray:
    """Median of `values` per group id (NaN and NO_INDEX rows ignored), from each group's
    sorted values (`sorted_groups`' layout); a group over PADDED_UP_TO rows (a GPU model's
    fleet) by selecting its two middle values, ~3x faster than sorting 30k readings."""
    out = np.full(n_groups, np.nan)
    layout = group_layout(groups, n_groups)
    if not layout.blocks:
        return out
    padded = np.append(values, np.nan)
    for gids, at in layout.blocks:
        if at.shape[1] > PADDED_UP_TO:
            out[gids] = _middle_of(values[at[0]])
        else:
            out[gids] = sorted_rows_median(np.sort(padded[at], axis=-1))[0]
    return out


def _middle_of(x: FloatArray) -> float:
    """The median of `x`'s non-NaN values (NaN if none): the two middle order statistics,
    placed by a partial sort, are the very values a full sort puts there."""
    x = x[~np.isnan(x)]
    c = x.shape[0]
    if c == 0:
        return float("nan")
    lo, hi = (c - 1) // 2, c // 2
    part = np.partition(x, (lo, hi) if lo != hi else lo)
    return float((part[lo] + part[hi]) / 2.0)


NARROW_GROUPS = 32
"""Up to this padded width (a job's GPUs on one node), `group_median_others` ranks each row
within its group by comparing it with the group's sorted values, instead of argsorting."""


def group_median_others(values: FloatArray, groups: IntArray, n_groups: int) -> FloatArray:
    """Per row, the median of the *other* rows of its group (NaN where it has none). An outlier
    pulls its own group's median toward itself (in a group of 8, by about half the spacing of
    the others); comparing it with the rest alone does not.

    Each group's values sorted along a padded row (`sorted_groups`' layout); a row's rank is
    how many of its group's values lie below it (a tied value removed is the same value
    wherever it sat). Wider groups take one argsort of the fleet (`_others_by_argsort`)."""
    out = np.full(values.shape[0], np.nan)
    layout = group_layout(groups, n_groups)
    if not layout.blocks:
        return out
    if max(at.shape[1] for _, at in layout.blocks) > NARROW_GROUPS:
        return _others_by_argsort(values, groups, n_groups)
    padded = np.append(values, np.nan)
    for _, at in layout.blocks:
        x = padded[at]  # each member's own value, NaN for padding and missing readings
        s = np.sort(x, axis=1)
        m = (at.shape[1] - np.count_nonzero(np.isnan(s), axis=1))[:, None] - 1  # others
        rank = np.count_nonzero(s[:, None, :] < x[:, :, None], axis=2)
        lo, hi = (m - 1) // 2, m // 2
        # Position q among the others is position q (below the row) or q + 1 (at or above it).
        has = (m > 0) & ~np.isnan(x)
        grp = np.nonzero(has)[0]
        lo_at, hi_at = (lo + (lo >= rank))[has], (hi + (hi >= rank))[has]
        out[at[has]] = (s[grp, lo_at] + s[grp, hi_at]) / 2.0
    return out


def _others_by_argsort(values: FloatArray, groups: IntArray, n_groups: int) -> FloatArray:
    """`group_median_others` by one grouped argsort of the fleet (any group size)."""
    out = np.full(values.shape[0], np.nan)
    ok = (groups != NO_INDEX) & ~np.isnan(values)
    if not np.any(ok) or n_groups == 0:
        return out
    rows = np.flatnonzero(ok)
    g = groups[ok]
    order = by_group_then_value(values[ok], g, n_groups)
    gs = g[order]
    vs = values[ok][order]
    counts = np.bincount(gs, minlength=n_groups)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    rank = np.arange(gs.shape[0]) - starts[gs]
    m = counts[gs] - 1  # how many others
    lo = (m - 1) // 2
    hi = m // 2
    lo_at = starts[gs] + lo + (lo >= rank)
    hi_at = starts[gs] + hi + (hi >= rank)
    has = m > 0
    med = np.full(gs.shape[0], np.nan)
    med[has] = (vs[lo_at[has]] + vs[hi_at[has]]) / 2.0
    out[rows[order]] = med
    return out


def group_count(mask: BoolArray, groups: IntArray, n_groups: int) -> IntArray:
    ok = mask & (groups != NO_INDEX)
    return np.bincount(groups[ok], minlength=n_groups).astype(np.int32)


def dt_since(last_now: float, now: float, interval: float) -> float:
    """Seconds since the previous cycle, capped so a long pause does not count as persistence."""
    if not np.isfinite(last_now) or now <= last_now:
        return interval
    return float(min(now - last_now, 4.0 * interval))


def persist(
    acc: AnyFloat, flagged: BoolArray, dt: float, cap: float, decay: float = 2.0
) -> F32Array:
    """Leaky persistence: seconds of condition, growing by dt while flagged, draining `decay`
    times faster while not. A condition that comes and goes (rotating imbalance, flapping
    throttle bits) never accumulates; one that holds reaches a threshold in its own duration.
    Capped at `cap` (the firing threshold), so an episode ends within cap/decay of its cause."""
    grown = np.where(flagged, np.minimum(acc + dt, cap), np.maximum(acc - decay * dt, 0.0))
    out: F32Array = np.asarray(grown, dtype=np.float32)
    return out


def hysteresis(acc: AnyFloat, was_active: BoolArray, need: float | AnyFloat) -> BoolArray:
    """Active once `acc` reaches `need`, and until it has fully drained again."""
    on: BoolArray = (acc >= need) | (was_active & (acc > 0.0))
    return on


def cusum(
    s: AnyFloat,
    x: AnyFloat,
    dt: float,
    reference: float,
    cap: float | AnyFloat,
    since: AnyFloat,
    now: float,
) -> tuple[FloatArray, FloatArray]:
    """Page's one-sided CUSUM integrated over time: S <- clip(S + dt*(x - reference), 0, cap).

    Evidence is weighed by seconds, not by samples, so 15 s and 30 s scrapes need the same time;
    a reading just under a threshold costs only its shortfall (x - reference), it does not reset
    the count; a signal with mean below `reference` (noise, imbalance that rotates) drifts to 0.
    Capped (at the firing threshold) so an episode ends within cap/(reference - x) of its cause.
    Also returns `since`, Page's estimate of the change point: when S last left zero (NaN while
    S is zero); NaN `x` contributes nothing. float64, so that S capped at the threshold still
    compares >= to it."""
    grown = np.where(np.isnan(x), s, np.clip(s + dt * (x - reference), 0.0, cap))
    out: FloatArray = np.asarray(grown, dtype=np.float64)
    kept = (s > 0.0) & ~np.isnan(since)
    left: FloatArray = np.where(out > 0.0, np.where(kept, since, now - dt), np.nan)
    return out, left
