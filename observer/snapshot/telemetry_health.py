"""Telemetry health: how fresh each node's exporter is, and the scrape interval.

Detectors must tell "no data" (exporter down, scrape gap) from "GPU gone" (XID 79). For that the
snapshot carries, per node, the newest DCGM sample time and whether the exporter is up, plus the
scrape interval that says what "fresh" means. The interval is inferred from sample spacing
(median, snapped to the intervals people configure), because Prometheus does not report it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from observer.fleet.columns import readonly
from observer.fleet.model import BoolArray, FloatArray, IntArray, TelemetryHealth
from observer.snapshot.inputs import ExporterHealth

DEFAULT_SCRAPE_INTERVAL = 30.0
"""dcgm-exporter's default collect interval, used when nothing better is known."""
COMMON_INTERVALS = (1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
SNAP_TOLERANCE = 0.15
"""A median spacing within 15 % of a common interval is that interval (jitter, one late scrape)."""
UP_AFTER_INTERVALS = 2.0
"""Without an `up` series, a node counts as up while its newest sample is this many intervals
old at most (one missed scrape is tolerated)."""


def snap_interval(seconds: float) -> float:
    """29.7 -> 30.0; 45 -> 45.0 (not near a common value: rounded to the second)."""
    if not np.isfinite(seconds) or seconds <= 0:
        return DEFAULT_SCRAPE_INTERVAL
    best = min(COMMON_INTERVALS, key=lambda c: abs(np.log(seconds / c)))
    if abs(seconds - best) <= SNAP_TOLERANCE * best:
        return best
    return float(max(1.0, round(seconds)))


def infer_scrape_interval(
    sample_times: Sequence[npt.ArrayLike], default: float = DEFAULT_SCRAPE_INTERVAL
) -> float:
    """Median spacing of consecutive samples over all given series, snapped; else `default`."""
    arrays = [np.asarray(t, dtype=np.float64).ravel() for t in sample_times]
    diffs = [np.diff(np.sort(t)) for t in arrays if t.size > 1]
    if not diffs:
        return default
    d = np.concatenate(diffs)
    d = d[np.isfinite(d) & (d > 0)]
    if d.size == 0:
        return default
    return snap_interval(float(np.median(d)))


def newest_per_node(gpu_newest: FloatArray, gpu_node: IntArray, n_nodes: int) -> FloatArray:
    """Per node, the newest of its GPUs' sample times (GPUs sorted by node; NaN: none)."""
    out = np.full(n_nodes, np.nan)
    if gpu_node.size == 0:
        return out
    starts = np.flatnonzero(np.r_[True, gpu_node[1:] != gpu_node[:-1]])
    out[gpu_node[starts]] = np.fmax.reduceat(gpu_newest, starts)
    return out


def telemetry_health(
    taken_at: float,
    node_names: Sequence[str],
    node_newest: FloatArray,
    exporters: ExporterHealth | None,
) -> TelemetryHealth:
    """Combine sample times with what the collector knows about exporters and the source."""
    ex = exporters or ExporterHealth()
    interval = (
        ex.scrape_interval
        if ex.scrape_interval
        else infer_scrape_interval(ex.sample_times, DEFAULT_SCRAPE_INTERVAL)
    )
    last = node_newest.copy()
    if ex.last_scrape:
        last = np.fmax(last, _per_node(node_names, ex.last_scrape, np.nan))
    fresh: BoolArray = (taken_at - last) <= UP_AFTER_INTERVALS * interval  # NaN compares False
    if ex.up:
        given = _per_node(node_names, {k: float(v) for k, v in ex.up.items()}, np.nan)
        up = np.where(np.isnan(given), fresh, given == 1.0)
    else:
        up = fresh
    return TelemetryHealth(
        node_last_sample=readonly(last),
        node_up=readonly(np.asarray(up, dtype=bool)),
        scrape_interval=float(interval),
        source_ok=ex.source_ok,
        degraded_reason=ex.degraded_reason,
    )


def _per_node(names: Sequence[str], values: Mapping[str, float], fill: float) -> FloatArray:
    return np.fromiter((values.get(n, fill) for n in names), dtype=np.float64, count=len(names))
