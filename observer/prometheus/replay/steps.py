"""One step of a raw-sample replay chunk -> the snapshot builder, with the instant cycle's rules.

observer.prometheus.replay.chunk_grids holds the chunk as (GPU key x step) grids; this module
slices one step and
hands the builder the inputs an instant cycle (observer.prometheus.assemble) would have handed it:
the identity rows (current label sets first, then vanished GPUs with NaN time), per family a
series keyed by identity row with the GPU's newest sample time, zeros for reporting GPUs where
a sparse error counter or the XID count is absent, counter increases joined on the GPU, and the
exporter facts. Kubernetes records (kube-state-metrics) are rebuilt only when their series or
values change from one step to the next.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from observer.fleet.model import FleetSnapshot, FloatArray, Node, Pod
from observer.prometheus.assemble import interval_from
from observer.prometheus.parse import exporter_up, pod_nodes
from observer.prometheus.plan import PromSettings, counter_families
from observer.prometheus.replay.chunk_grids import (
    Identity,
    PodSteps,
    Timing,
    present_vector,
    signature,
)
from observer.prometheus.replay.matrix import RawBlock
from observer.prometheus.replay.step_grid import IndexGrid
from observer.prometheus.replay.step_metrics import StepMetrics
from observer.snapshot.builder import BuildReport, SnapshotBuilder
from observer.snapshot.inputs import ExporterHealth, GpuColumns, PodSeries
from observer.snapshot.kube_records import records_from_series

COUNTERS = frozenset(counter_families())


@dataclass(frozen=True, slots=True)
class Selected:
    """A small raw selector's samples and its per-step newest-sample grid."""

    block: RawBlock
    grid: IndexGrid


@dataclass(slots=True)
class Chunk:
    timing: Timing
    ident: Identity
    gpu_rows: GpuColumns
    """The identity label-set universe (ident.rows) as columns, to be sliced per step."""
    values: Mapping[str, FloatArray]
    increases: Mapping[str, FloatArray]
    spans: Mapping[str, FloatArray]
    """Per counter family, the seconds each increase covers (observer.prometheus.memory)."""
    missing: frozenset[str]
    """Families whose fetch failed this chunk (no values, no increase)."""
    xid: Mapping[str, FloatArray] | None
    steps: PodSteps | None
    up: Selected | None
    kube: Selected | None
    kube_status: Selected | None
    present: frozenset[str]
    sparse_ok: bool
    problems: Sequence[str]
    interval: float | None
    metrics: StepMetrics
    """The metric answers of every step (from values, increases, spans and xid)."""


@dataclass(slots=True)
class KubeCache:
    """Nodes, pods and exporter states of the previous step, and what they were built from."""

    key: tuple[bytes, ...] = ()
    records: tuple[list[Node], list[Pod]] = field(default_factory=lambda: ([], []))
    up_key: tuple[object, ...] = ()
    up: dict[str, bool] = field(default_factory=dict)
    rows: np.ndarray | None = None
    """The identity rows of the previous step, and their label columns (handed to the
    builder again while they stay the same: observer.snapshot.structure)."""
    gpus: GpuColumns | None = None
    known_from: tuple[object, object] = (None, None)
    """The (gpus, kube key) objects `known` was made from."""
    known: frozenset[str] = frozenset()


def take_rows(cols: GpuColumns, rows: np.ndarray, stamp: FloatArray) -> GpuColumns:
    def opt(c: np.ndarray | None) -> np.ndarray | None:
        return None if c is None else c[rows]

    return GpuColumns(
        uuid=cols.uuid[rows], hostname=cols.hostname[rows], device_index=cols.device_index[rows],
        model_name=cols.model_name[rows], pci_bus_id=opt(cols.pci_bus_id),
        mig_instance=opt(cols.mig_instance), mig_profile=opt(cols.mig_profile),
        pod=opt(cols.pod), namespace=opt(cols.namespace), timestamp=stamp,
    )  # fmt: skip


def _kube(c: Chunk, k: int, s: PromSettings, cache: KubeCache) -> tuple[list[Node], list[Pod]]:
    parts = [x for x in (c.kube, c.kube_status) if x is not None]
    key = tuple(b for x in parts for b in signature(x.block, x.grid, k))
    if key != cache.key or not cache.key:
        kube = present_vector(c.kube.block, c.kube.grid, k) if c.kube else []
        status = (
            present_vector(c.kube_status.block, c.kube_status.grid, k, only=1.0)
            if c.kube_status
            else []
        )
        cache.records = records_from_series(kube, status, s.target_labels)
        cache.key = key
    return cache.records


def build_step(
    c: Chunk, k: int, s: PromSettings, builder: SnapshotBuilder, cache: KubeCache
) -> tuple[FleetSnapshot, BuildReport]:
    """The snapshot at step k of the chunk."""
    ident = c.ident
    t = float(c.timing.times[k])
    cur_rows = np.flatnonzero(~np.isnan(ident.row_stamp[:, k]))
    van_keys = np.flatnonzero(ident.vanished_row[:, k] >= 0)
    rows = np.concatenate([cur_rows, ident.vanished_row[van_keys, k]])
    n_cur = cur_rows.shape[0]
    stamp_rows = np.concatenate([ident.row_stamp[cur_rows, k], np.full(van_keys.shape[0], np.nan)])
    if cache.gpus is not None and cache.rows is not None and np.array_equal(rows, cache.rows):
        gpus = dataclasses.replace(cache.gpus, timestamp=stamp_rows)
    else:
        gpus = take_rows(c.gpu_rows, rows, stamp_rows)
        cache.rows, cache.gpus = rows, gpus
    key_row = np.full(len(ident.keys), -1, dtype=np.int64)
    key_row[van_keys] = n_cur + np.arange(van_keys.shape[0])
    key_row[ident.row_key[cur_rows]] = np.arange(n_cur)
    grid = c.metrics.at(k, key_row)
    nodes, pods = _kube(c, k, s, cache)
    made_from = cache.known_from
    if made_from[0] is not cache.gpus or made_from[1] is not cache.key:  # hosts or nodes moved
        cache.known = frozenset({h for h in gpus.hostname.tolist() if h}
                                | {str(n.name) for n in nodes})  # fmt: skip
        cache.known_from = (cache.gpus, cache.key)
    known = cache.known
    up: dict[str, bool] = {}
    if c.up is not None:
        up_key = (*signature(c.up.block, c.up.grid, k), known, cache.key)
        if up_key != cache.up_key:  # cache.key: the pods (an exporter pod may name the node)
            up_now = present_vector(c.up.block, c.up.grid, k)
            cache.up, _ = exporter_up(up_now, set(known), pod_nodes(pods))
            cache.up_key = up_key
        up = cache.up
    last = ident.node_last[:, k]
    last_scrape = {h: float(v) for h, v in zip(ident.hosts, last.tolist(), strict=True)
                   if h in known and v == v}  # fmt: skip
    exporters = ExporterHealth(
        up=up,
        last_scrape=last_scrape,
        scrape_interval=c.interval,
        source_ok=not c.problems,
        degraded_reason="; ".join(c.problems),
    )
    return builder.build_with_report(
        t, gpus, {}, nodes=nodes, pods=pods, steps=_pod_series(c.steps, k, t),
        exporters=exporters, grid=grid,
    )  # fmt: skip


def _pod_series(steps: PodSteps | None, k: int, t: float) -> PodSeries | None:
    if steps is None:
        return None
    has = np.flatnonzero(~np.isnan(steps.value[:, k]))
    if has.size == 0:
        return None
    return PodSeries(
        namespace=steps.namespace[has], pod=steps.pod[has], value=steps.value[has, k],
        timestamp=np.full(has.size, t), increase=steps.increase[has, k],
    )  # fmt: skip


__all__ = ["Chunk", "KubeCache", "Selected", "build_step", "interval_from"]
