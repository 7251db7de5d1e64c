"""The snapshot builder: the one place where collected columns become a FleetSnapshot.

The Prometheus collector, the direct-scrape collector and the simulator all end here, so that the
same fleet yields the same snapshot whichever way it was observed. The builder is vectorised:
GPUs are only ever numpy columns (no per-GPU objects, no Python loop over GPUs); pods, nodes and
jobs are records because there are 8x fewer of them. A 100k-GPU fleet builds in well under a
second (docs/performance.md).

What it guarantees:
- Canonical order: nodes by name, GPUs by (node, `gpu` index, MIG instance), pods by
  `namespace/name`, jobs by key. Two collectors that saw the same fleet give equal snapshots.
- Nothing dropped silently: GPUs on nodes unknown to Kubernetes keep a node
  (`Node.in_kubernetes=False`); a `pod` label naming a pod Kubernetes did not list gets a pod
  (phase `Unknown`); series whose GPU is not in the identity rows are counted in the report.
- Duplicates (two Prometheus replicas, overlapping scrapes) resolve to the newest sample;
  metric aliases (`DCGM_FI_DEV_CLOCKS_EVENT_REASONS`) fold into the catalog name.
- Missing data is NaN, and every catalog metric has a column (all-NaN when not collected).
- Immutable: frozen records, read-only mappings, arrays with `flags.writeable = False`.

Inputs are columns (observer.snapshot.inputs): `GpuColumns` (identity rows), `MetricSeries` per
metric, `PodSeries` for `training_steps_total`, `ExporterHealth`; nodes and pods are records
(observer.snapshot.kube_records makes them from kube-state-metrics series or API objects). Example:

>>> import numpy as np
>>> from observer.fleet.model import NodeName, Pod, frozen_map
>>> from observer.snapshot.inputs import GpuColumns, MetricSeries
>>> gpus = GpuColumns.from_label_dicts([
...     {"UUID": "GPU-a", "Hostname": "node-1", "gpu": "0", "modelName": "NVIDIA H100",
...      "pod": "llama-worker-0", "namespace": "ml"},
...     {"UUID": "GPU-b", "hostname": "node-1", "gpu": "1", "modelName": "NVIDIA H100"},
... ])
>>> util = MetricSeries(value=np.array([97.0, 3.0]), timestamp=np.array([100.0, 100.0]),
...                     uuid=np.array(["GPU-b", "GPU-a"], dtype=object))
>>> pod = Pod("ml", "llama-worker-0", NodeName("node-1"),
...           labels=frozen_map({"training.kubeflow.org/job-name": "llama"}))
>>> snap = build_snapshot(105.0, gpus, {"DCGM_FI_DEV_GPU_UTIL": util}, pods=[pod])
>>> snap.jobs[0].key, snap.pods[0].rank, snap.gpus.job_index.tolist()
('ml/llama', 0, [0, -1])
>>> snap.metrics["DCGM_FI_DEV_GPU_UTIL"].value.tolist()
[3.0, 97.0]
>>> snap.nodes[0].in_kubernetes  # node-1 is known from GPU labels only
False

`SnapshotBuilder(...).build_with_report(...)` also returns a `BuildReport` (duplicates, unknown
series, nodes outside Kubernetes, pods synthesised from GPU labels) for the collector to log.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import numpy as np

from observer.fleet.catalog import METRICS, Kind, canonical_name
from observer.fleet.columns import lookup_runs, newest_per_position, readonly, run_starts
from observer.fleet.model import (
    NO_INDEX,
    Event,
    FleetSnapshot,
    IntArray,
    Job,
    JobKey,
    MetricColumn,
    Node,
    NodeName,
    Pod,
)
from observer.snapshot.gpu_rows import NO_HOSTNAME, GpuRows, resolve_gpu_rows
from observer.snapshot.gpu_sharing import SharedPod, shared_pods
from observer.snapshot.inputs import ExporterHealth, GpuColumns, MetricSeries, PodSeries
from observer.snapshot.job_identity import DEFAULT_JOB_LABEL_KEYS, JobIdentity
from observer.snapshot.metric_grid import MetricGrid, place
from observer.snapshot.node_join import join_hostnames
from observer.snapshot.pod_assignment import (
    PodAssignment,
    PodAssignmentCache,
    PodLabels,
    attribute_by_node,
)
from observer.snapshot.structure import Structure, StructureCache
from observer.snapshot.telemetry_health import newest_per_node, telemetry_health


@dataclass(frozen=True, slots=True)
class BuildReport:
    """What the builder had to reconcile; the collector logs and counts it."""

    identity_rows: int
    gpus: int
    duplicate_identity_rows: int
    duplicate_series: Mapping[str, int]
    """Metric -> series dropped because a newer sample of the same GPU existed."""
    unknown_series: Mapping[str, int]
    """Metric -> series dropped because their GPU is not among the identity rows."""
    nodes_not_in_kubernetes: tuple[str, ...]
    pods_from_gpu_labels: tuple[str, ...]
    """`namespace/name` of pods named by GPU labels but absent from the pod list."""


@dataclass(frozen=True, slots=True)
class SnapshotBuilder:
    """Configuration of the build (job identity, cluster name); `build` is pure."""

    job_identity: JobIdentity = field(default_factory=JobIdentity)
    cluster: str = "default"
    fill_catalog: bool = True
    """Give every catalog metric a column, all-NaN when not collected."""
    pod_cache: PodAssignmentCache | None = field(default=None, compare=False, repr=False)
    """Reuse the last pod/job assignment when its inputs repeat (observer.snapshot.pod_assignment);
    collectors running cycles in time order set it, one-off builds need not."""

    structure_cache: StructureCache | None = field(default=None, compare=False, repr=False)
    """Reuse the last GPU order, nodes, pods and jobs when the same identity columns and equal
    records come again (observer.snapshot.structure: a replay's steps between changes)."""

    def with_pod_cache(self) -> SnapshotBuilder:
        """This builder with fresh pod-assignment and structure caches of its own."""
        return replace(self, pod_cache=PodAssignmentCache(), structure_cache=StructureCache())

    def build(
        self,
        taken_at: float,
        gpus: GpuColumns,
        metrics: Mapping[str, MetricSeries | Sequence[MetricSeries]],
        *,
        nodes: Iterable[Node] = (),
        pods: Iterable[Pod] = (),
        steps: PodSeries | None = None,
        exporters: ExporterHealth | None = None,
        events: Iterable[Event] = (),
    ) -> FleetSnapshot:
        return self.build_with_report(
            taken_at,
            gpus,
            metrics,
            nodes=nodes,
            pods=pods,
            steps=steps,
            exporters=exporters,
            events=events,
        )[0]

    def build_with_report(
        self,
        taken_at: float,
        gpus: GpuColumns,
        metrics: Mapping[str, MetricSeries | Sequence[MetricSeries]],
        *,
        nodes: Iterable[Node] = (),
        pods: Iterable[Pod] = (),
        steps: PodSeries | None = None,
        exporters: ExporterHealth | None = None,
        events: Iterable[Event] = (),
        grid: MetricGrid | None = None,
    ) -> tuple[FleetSnapshot, BuildReport]:
        """`grid`: more metrics, many families at once (observer.snapshot.metric_grid), after
        `metrics`' families."""
        node_list = list(nodes)
        pod_list = list(pods)
        extra_nodes: frozenset[str] = frozenset()
        if exporters is not None:
            extra_nodes = frozenset(exporters.up) | frozenset(exporters.last_scrape)

        def build() -> Structure:
            return self._structure(gpus, node_list, pod_list, extra_nodes)

        cache = self.structure_cache
        st = build() if cache is None else cache.structure(gpus, node_list, pod_list,
                                                           extra_nodes, build)  # fmt: skip
        if exporters is not None and any(k != v for k, v in st.join.items()):
            exporters = _rename_exporters(exporters, st.join)
        rows, table, pod_records, jobs = st.rows, st.table, st.pods, st.jobs
        columns, dup_series, unknown_series, gpu_newest = self._metrics(rows, metrics, grid)
        node_newest = newest_per_node(gpu_newest, table.node_index, len(rows.nodes))
        telemetry = telemetry_health(taken_at, [n.name for n in rows.nodes], node_newest, exporters)
        job_steps, job_steps_inc = _job_steps(steps, pod_records, jobs, st.pod_job)
        snapshot = FleetSnapshot(
            taken_at=float(taken_at),
            nodes=rows.nodes,
            gpus=table,
            pods=pod_records,
            jobs=jobs,
            metrics=MappingProxyType(columns),
            job_steps=MappingProxyType(job_steps),
            job_steps_increase=MappingProxyType(job_steps_inc),
            telemetry=telemetry,
            events=tuple(sorted(events, key=lambda e: e.time)),
            cluster=self.cluster,
            shared_pods=st.shared,
        )
        report = BuildReport(
            identity_rows=len(gpus),
            gpus=len(table),
            duplicate_identity_rows=rows.duplicate_rows,
            duplicate_series=MappingProxyType(dup_series),
            unknown_series=MappingProxyType(unknown_series),
            nodes_not_in_kubernetes=tuple(n.name for n in rows.nodes if not n.in_kubernetes),
            pods_from_gpu_labels=st.synthesised,
        )
        return snapshot, report

    def _structure(
        self, gpus: GpuColumns, node_list: list[Node], pod_list: list[Pod],
        extra_nodes: frozenset[str],
    ) -> Structure:  # fmt: skip
        """Who is where: GPU order and nodes (hostnames joined), pods, jobs, the GPU table."""
        hosts = {str(h) for h in np.unique(gpus.hostname).tolist()} | extra_nodes
        join = join_hostnames(hosts, [str(n.name) for n in node_list], pod_list)
        extra = {join.get(k, k) for k in extra_nodes} if join else set(extra_nodes)
        rows = resolve_gpu_rows(gpus, node_list, extra, join)
        labels = attribute_by_node(rows.pod_labels(), pod_list)  # no pod labels: by node
        sharing = shared_pods(rows)  # time-sliced GPUs' other pods (virtual-GPU series)
        pod_records, jobs, pod_index, synthesised = (
            self.pod_cache.assign(pod_list, labels, lambda: self._pods(labels, pod_list))
            if self.pod_cache is not None and not sharing
            else self._pods(labels, pod_list, sharing)
        )
        shared = _shared_positions(sharing, pod_records)
        pod_job = np.array([p.job_index for p in pod_records] + [NO_INDEX], dtype=np.int32)
        table = rows.table(pod_index, readonly(pod_job[pod_index]))
        return Structure(join, rows, pod_records, jobs, synthesised, shared, pod_job, table)

    def _metrics(
        self,
        rows: GpuRows,
        metrics: Mapping[str, MetricSeries | Sequence[MetricSeries]],
        grid: MetricGrid | None = None,
    ) -> tuple[dict[str, MetricColumn], dict[str, int], dict[str, int], np.ndarray]:
        grouped: dict[str, list[MetricSeries]] = {}
        for name, series in metrics.items():
            parts = [series] if isinstance(series, MetricSeries) else list(series)
            grouped.setdefault(canonical_name(name), []).extend(parts)
        g = rows.count
        columns: dict[str, MetricColumn] = {}
        dups: dict[str, int] = {}
        unknown: dict[str, int] = {}
        newest = np.full(g, np.nan)
        placed = None
        if grid is not None:
            names = [canonical_name(n) for n in grid.names]
            if len(set(names)) == len(names) and not set(names) & set(grouped):
                placed = place(grid, rows.row_to_gpu(), g)
            if placed is None:  # the general path decides (module doc of metric_grid)
                for name, one in grid.series().items():
                    grouped.setdefault(canonical_name(name), []).append(one)
        for name, parts in grouped.items():
            if not parts:
                continue
            pos = np.concatenate([rows.positions(s) for s in parts])
            ts = np.concatenate([s.timestamp for s in parts]).astype(np.float64, copy=False)
            keep, n_dup, n_unknown = newest_per_position(pos, ts)
            if n_dup:
                dups[name] = n_dup
            if n_unknown:
                unknown[name] = n_unknown
            at = pos[keep]
            value = _scatter(g, at, np.concatenate([s.value for s in parts])[keep])
            stamp = _scatter(g, at, ts[keep])
            increase = None
            if any(s.increase is not None for s in parts):
                inc = np.concatenate([_increase(s) for s in parts])
                increase = _scatter(g, at, inc[keep])
            window = max(s.window_seconds for s in parts)
            span = None
            if any(s.span is not None for s in parts):
                spans = np.concatenate([_span(s, window) for s in parts])
                span = _scatter(g, at, spans[keep])
            columns[name] = MetricColumn(value, stamp, increase, window, span)
            np.fmax(newest, stamp, out=newest)
        if grid is not None and placed is not None:
            for f in np.flatnonzero(grid.given).tolist():
                name = canonical_name(grid.names[f])
                counted = bool(grid.has_increase[f])
                stamp = readonly(placed.timestamp[f])
                columns[name] = MetricColumn(
                    readonly(placed.value[f]), stamp,
                    readonly(placed.increase[f]) if counted else None, float(grid.window[f]),
                    readonly(placed.span[f]) if counted and grid.has_span[f] else None,
                )  # fmt: skip
                if placed.unknown[f]:
                    unknown[name] = int(placed.unknown[f])
                np.fmax(newest, stamp, out=newest)
        if self.fill_catalog:
            nan = readonly(np.full(g, np.nan))
            for spec in METRICS:
                if spec.name not in columns:
                    inc_nan = nan if spec.kind == Kind.COUNTER else None
                    columns[spec.name] = MetricColumn(nan, nan, inc_nan, 0.0)
        return columns, dups, unknown, newest

    def _pods(
        self, labels: PodLabels, pods: list[Pod], sharing: Sequence[SharedPod] = ()
    ) -> PodAssignment:
        by_key: dict[tuple[str, str], Pod] = {(p.namespace, p.name): p for p in pods}
        ns, name, host = labels
        named = np.flatnonzero(name != "")
        heads = named[run_starts(ns[named], name[named])]  # one row per GPU-holding pod
        missing: list[str] = []
        held = zip(ns[heads].tolist(), name[heads].tolist(), host[heads].tolist(), strict=True)
        for n_, p_, h_ in [*held, *((n, p, h) for _, n, p, h in sharing)]:
            if (n_, p_) not in by_key:
                at = NodeName(h_) if h_ and h_ != NO_HOSTNAME else None
                by_key[(n_, p_)] = Pod(n_, p_, at, phase="Unknown")
                missing.append(f"{n_}/{p_}")
        ordered = [by_key[k] for k in sorted(by_key)]
        records, jobs = self.job_identity.assign(ordered)
        index = {(p.namespace, p.name): i for i, p in enumerate(records)}
        pod_index = readonly(lookup_runs(index, ns, name))
        return records, jobs, pod_index, tuple(sorted(set(missing)))


def _shared_positions(
    sharing: Sequence[SharedPod], pods: Sequence[Pod]
) -> tuple[tuple[int, int], ...]:
    """(GPU, pod position) pairs of the pods sharing GPUs."""
    if not sharing:
        return ()
    index = {(p.namespace, p.name): i for i, p in enumerate(pods)}
    return tuple(sorted({(g, index[(n, p)]) for g, n, p, _ in sharing}))


def _increase(s: MetricSeries) -> np.ndarray:
    return s.increase if s.increase is not None else np.full(len(s), np.nan)


def _span(s: MetricSeries, window: float) -> np.ndarray:
    return s.span if s.span is not None else np.full(len(s), window)


def _scatter(n: int, at: IntArray, values: np.ndarray) -> np.ndarray:
    out = np.full(n, np.nan)
    out[at] = values
    return readonly(out)


def _job_steps(
    steps: PodSeries | None, pods: tuple[Pod, ...], jobs: tuple[Job, ...], pod_job: IntArray
) -> tuple[dict[JobKey, float], dict[JobKey, float]]:
    """`training_steps_total` (and its increase) per job: newest per pod, summed over pods."""
    if steps is None or len(steps.value) == 0 or not jobs:
        return {}, {}
    index = {(p.namespace, p.name): i for i, p in enumerate(pods)}
    pos = lookup_runs(index, steps.namespace, steps.pod)
    ts = steps.timestamp if steps.timestamp is not None else np.zeros(len(pos))
    keep, _, _ = newest_per_position(pos, ts)
    job = pod_job[pos[keep]]
    total = _sum_by_job(job, np.asarray(steps.value, dtype=np.float64)[keep], jobs)
    inc = {}
    if steps.increase is not None:
        inc = _sum_by_job(job, np.asarray(steps.increase, dtype=np.float64)[keep], jobs)
    return total, inc


def _sum_by_job(job: IntArray, values: np.ndarray, jobs: tuple[Job, ...]) -> dict[JobKey, float]:
    ok = (job >= 0) & ~np.isnan(values)
    sums = np.bincount(job[ok], weights=values[ok], minlength=len(jobs))
    seen = np.bincount(job[ok], minlength=len(jobs)) > 0
    return {jobs[j].key: float(sums[j]) for j in np.flatnonzero(seen)}


def _rename_exporters(ex: ExporterHealth, join: Mapping[str, str]) -> ExporterHealth:
    """The exporters' health keyed by the Kubernetes node each hostname joined."""
    up: dict[str, bool] = {}
    for k, v in ex.up.items():
        node = join.get(k, k)
        up[node] = up.get(node, False) or v
    last: dict[str, float] = {}
    for k, t in ex.last_scrape.items():
        node = join.get(k, k)
        last[node] = max(last.get(node, t), t)
    return replace(ex, up=up, last_scrape=last)


def build_snapshot(
    taken_at: float,
    gpus: GpuColumns,
    metrics: Mapping[str, MetricSeries | Sequence[MetricSeries]],
    *,
    nodes: Iterable[Node] = (),
    pods: Iterable[Pod] = (),
    steps: PodSeries | None = None,
    exporters: ExporterHealth | None = None,
    events: Iterable[Event] = (),
    job_label_keys: Sequence[str] = DEFAULT_JOB_LABEL_KEYS,
    cluster: str = "default",
) -> FleetSnapshot:
    """`SnapshotBuilder(JobIdentity(job_label_keys), cluster).build(...)` in one call."""
    builder = SnapshotBuilder(JobIdentity(tuple(job_label_keys)), cluster)
    return builder.build(
        taken_at,
        gpus,
        metrics,
        nodes=nodes,
        pods=pods,
        steps=steps,
        exporters=exporters,
        events=events,
    )
