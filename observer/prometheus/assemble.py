"""One cycle's PromQL answers -> a FleetSnapshot, through the one snapshot builder.

Separate from the HTTP adapter (observer.prometheus.collector) so that instant cycles and the steps
of a range replay assemble identically, and so the rules live in one readable place:
- counters join their latest value with their increase: the server-side `increase()` on a cold
  start, on warm cycles the collector's memory of totals (observer.prometheus.memory), with
  the
  seconds each GPU's increase covers (`span`: the window, or more after a gap);
- sparse answers become 0 for GPUs that report: error counters when the family exists at all
  and the answer is complete (a failed or partial one fills nothing; the memory reads a missing
  total as absent, never as 0 — observer.prometheus.memory.feed), the XID count always
  (dcgm-exporter
  omits zero counts);
- `up`, each exporter's last good scrape and the inferred scrape interval feed TelemetryHealth;
- a failed or partial query marks the snapshot degraded with the reason, never silently.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

import numpy as np

from observer.fleet.catalog import XID_COUNT_METRIC
from observer.fleet.model import Event, FleetSnapshot, Node, Pod
from observer.prometheus.memory import CounterMemory, feed
from observer.prometheus.parse import (
    Columns,
    Vector,
    exporter_up,
    family_rows,
    fresh_xid_counts,
    gpu_series,
    identity,
    last_up,
    merge_counter,
    newest_pods,
    pod_nodes,
    pod_series,
    present_families,
    values,
)
from observer.prometheus.plan import SPARSE_COUNTERS, PromSettings, counter_families
from observer.snapshot.builder import BuildReport, SnapshotBuilder
from observer.snapshot.cycle_stats import QueryStat
from observer.snapshot.inputs import ExporterHealth, GpuColumns, MetricSeries, fill_zero, keys_list
from observer.snapshot.kube_records import records_from_series
from observer.snapshot.telemetry_health import snap_interval

R = TypeVar("R")
Answers = Mapping[str, Vector | None]
"""Query name -> its vector, or None when that query failed this cycle."""


def _stamps(current: Vector) -> dict[str, float]:
    """GPU key -> newest sample time over its current label sets."""
    out: dict[str, float] = {}
    if not current:
        return out
    v = values(current)
    uuid = [r["metric"].get("UUID", "") for r in current]
    mig = [r["metric"].get("GPU_I_ID", "") for r in current]
    for k, t in zip(keys_list(np.array(uuid, dtype=object), np.array(mig, dtype=object)),
                    v.tolist(), strict=True):  # fmt: skip
        if t > out.get(k, -np.inf):
            out[k] = t
    return out


PARTIAL_IS_FAILED = ("values:sparse", "increase:", "raw:sparse", "xid_count", "raw:xid")
"""Answers that count as failed when they came back with warnings (a partial response): a
sparse answer lists only non-zero totals (error counters; XID counts, which dcgm-exporter omits
at zero), so a GPU missing from a partial one would be read as 0, and its return as new errors;
the cycle is marked degraded either way."""


def drop_partial(
    answers: Mapping[str, R | None], stats: Iterable[QueryStat]
) -> dict[str, R | None]:
    """`answers` with the partial (warned) sparse and `increase:*` answers as failed (None)."""
    partial = {st.name for st in stats if st.ok and st.problem}
    return {
        name: None if name in partial and name.startswith(PARTIAL_IS_FAILED) else a
        for name, a in answers.items()
    }


def interval_from(answer: Vector | None) -> float | None:
    """Scrape interval from the `interval` query's median spacing; None when unknown."""
    if not answer:
        return None
    spacing = float(answer[0]["value"][1])
    return snap_interval(spacing) if spacing > 0 and np.isfinite(spacing) else None


def gpu_metrics(
    answers: Answers,
    s: PromSettings,
    gpus: GpuColumns,
    value_columns: Callable[[Mapping[str, str] | None], Mapping[str, Columns]] | None = None,
    counters: CounterMemory | None = None,
    cold: bool = True,
    at: float = 0.0,
) -> dict[str, MetricSeries]:
    """Metric columns; `gpus` are the identity rows, current ones first (as `identity` makes).
    `value_columns` (range replays) gives the `values:*` families as columns, given the
    newest-pod filter, instead of their answers. Counter increases come from the `increase:*`
    answers on a cold start (seeding `counters`), and from `counters` on warm cycles."""
    current = answers.get("identity") or []
    n_cur = len(current)
    stamp_of = _stamps(current)
    present = present_families(answers.get("families") or [])
    if value_columns is not None:
        by_family = dict(value_columns(newest_pods(current)))
    else:
        value_answers = [a for k, a in answers.items() if k.startswith("values:") and a]
        by_family = family_rows(value_answers, newest_pods(current))
    metrics = {fam: gpu_series(cols, stamp_of) for fam, cols in by_family.items()}
    sparse_ok = answers.get("values:sparse") is not None  # failed or partial: None
    complete = frozenset(f for f in SPARSE_COUNTERS if f in present and sparse_ok)
    warm = counters is not None and not cold
    for fam in counter_families():
        value = metrics.get(fam)
        if fam in complete:  # the snapshot's value: reporting GPUs without a total have 0
            value = fill_zero(value, gpus, n_cur)
        if warm:
            if value is not None:
                metrics[fam] = value
            continue
        rows = answers.get(f"increase:{fam}")
        inc = gpu_series(rows, stamp_of, s.window, as_increase=True) if rows else None
        if rows is not None and fam in SPARSE_COUNTERS and fam in present:
            inc = fill_zero(inc, gpus, n_cur, increase=True, window=s.window)
        merged = merge_counter(value, inc)
        if merged is not None:
            metrics[fam] = merged
    if counters is not None:
        series = {f: metrics[f] for f in counter_families() if f in metrics}
        derived = feed(counters, at, cold, stamp_of, series, complete)
        for fam, (inc_rows, span_rows) in derived.items():
            v = metrics[fam]
            metrics[fam] = MetricSeries(v.value, v.timestamp, v.uuid, v.mig_instance,
                                        increase=inc_rows, window_seconds=s.window,
                                        span=span_rows)  # fmt: skip
    xid = answers.get("xid_count")
    if xid is not None:  # dcgm-exporter omits zero counts: reporting GPUs without one have 0
        fresh = fresh_xid_counts(xid, stamp_of)
        for name, rows in fresh.items():
            metrics[name] = gpu_series(rows, stamp_of)
        metrics[XID_COUNT_METRIC] = fill_zero(metrics.get(XID_COUNT_METRIC), gpus, n_cur)
    return metrics


def assemble(
    answers: Answers,
    at: float,
    s: PromSettings,
    problems: Sequence[str],
    builder: SnapshotBuilder,
    *,
    nodes: Sequence[Node] | None = None,
    pods: Sequence[Pod] | None = None,
    events: Iterable[Event] = (),
    value_columns: Callable[[Mapping[str, str] | None], Mapping[str, Columns]] | None = None,
    counters: CounterMemory | None = None,
    cold: bool = True,
) -> tuple[FleetSnapshot, BuildReport]:
    """Build the snapshot at `at`. Kubernetes records given by the caller (the Kubernetes
    collector) win over kube-state-metrics'. With `counters`, warm cycles (`cold` False) derive
    counter increases from it, and cold ones seed it (observer.prometheus.memory)."""
    gpus = identity(answers.get("identity") or [], answers.get("vanished") or [])
    ksm_nodes, ksm_pods = records_from_series(
        answers.get("kube") or [], answers.get("kube_status") or [], s.target_labels
    )
    node_list = list(nodes) if nodes is not None else ksm_nodes
    pod_list = list(pods) if pods is not None else ksm_pods
    known = {str(h) for h in gpus.hostname.tolist() if h} | {str(n.name) for n in node_list}
    exporter_pods = pod_nodes(pod_list)
    up, _unmapped = exporter_up(answers.get("up") or [], known, exporter_pods)
    exporters = ExporterHealth(
        up=up,
        last_scrape=last_up(answers.get("up_last") or [], known, exporter_pods),
        scrape_interval=interval_from(answers.get("interval")),
        source_ok=not problems,
        degraded_reason="; ".join(problems),
    )
    steps = pod_series(answers.get("steps") or [], answers.get("steps_increase") or [])
    return builder.build_with_report(
        at,
        gpus,
        gpu_metrics(answers, s, gpus, value_columns, counters, cold, at),
        nodes=node_list,
        pods=pod_list,
        steps=steps,
        exporters=exporters,
        events=events,
    )
