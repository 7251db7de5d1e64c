"""Simulated samples -> FleetSnapshot, exactly as a Prometheus collector would have seen them.

For detector tests and `eval` without a Prometheus in the loop. At evaluation time `t` the
adapter answers what an instant query would: each series' newest sample within the lookback
window (5 min by default, like Prometheus; backfilled data has no staleness markers, so a
vanished series keeps answering with its *old* sample and timestamp until the lookback passes),
and for counters the reset-aware, extrapolated `increase(x[window])` of PromQL (both from
observer.promql). Scrapes happen
on the scenario's grid (start + k * scrape_interval); samples are cached per scrape, so a replay
in time order samples each scrape once. The snapshot itself is built by the same
`observer.snapshot.builder` the real collectors use.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

import numpy as np
import numpy.typing as npt

from observer.fleet.catalog import BY_NAME, XID_COUNT_METRIC, Kind, xid_count_column
from observer.fleet.model import BoolArray, FleetSnapshot, FloatArray, Node, NodeName, Pod
from observer.promql import DEFAULT_LOOKBACK, Semantics, fresh, increase_columns
from observer.snapshot.builder import SnapshotBuilder
from observer.snapshot.inputs import ExporterHealth, GpuColumns, MetricSeries, PodSeries
from simulator.device_health import device_faults, gpu_allocatable_at, unhealthy_at
from simulator.engine import FleetSimulator, Sample
from simulator.exporter_rows import ExporterRows, exporter_rows
from simulator.layout import SimPod
from simulator.mig_series import UNSUPPORTED_ON_MIG

Index = npt.NDArray[np.signedinteger[Any]]
"""Row or scrape positions (numpy's index integers)."""

SEMANTICS = Semantics(left_open=True, zero_point_first=True)
"""The simulator's PromQL: windows and lookback left-open (as 3.x), extrapolation capped at the
counter's zero point before the 1.1-interval test (as 2.x). Kept as it has always been so that
the suite's scores stay comparable across releases."""


def increase(times: FloatArray, values: np.ndarray, t: float, window: float) -> FloatArray:
    """PromQL `increase(x[window])` at `t` over rows of samples (scrapes x series), per series;
    NaN where a series has fewer than two samples in the window."""
    return increase_columns(times, values, t - window, t, SEMANTICS)


class SimSnapshots:
    """Snapshots of a simulated fleet at any time, as a Prometheus collector would build them.

    `window`: the collector's counter increase window; `lookback`: Prometheus' lookback delta.
    """

    def __init__(
        self,
        sim: FleetSimulator,
        window: float = 120.0,
        lookback: float = DEFAULT_LOOKBACK,
        cache_size: int = 64,
    ) -> None:
        self.sim = sim
        self.window = window
        self.lookback = lookback
        self.cache_size = cache_size
        self._cache: OrderedDict[int, Sample] = OrderedDict()
        sc = self.sim.scenario
        lay = self.sim.layout
        self._faults = device_faults(sc, lay)
        self._nodes_at: tuple[tuple[tuple[str, int], ...], tuple[Node, ...]] | None = None
        self._node_names = np.array([n.name for n in lay.nodes], dtype=object)
        self._interval = float(sc.scrape_interval)
        self._builder = SnapshotBuilder(cluster=sc.cluster).with_pod_cache()

    def _scrape(self, k: int) -> Sample:
        cache = self._cache
        hit = cache.get(k)
        if hit is None:
            hit = self.sim.sample(self.sim.scenario.start + k * self._interval)
            cache[k] = hit
            while len(cache) > self.cache_size:
                cache.popitem(last=False)
        return hit

    def scrapes(self, t: float, span: float) -> list[Sample]:
        """Scrapes in (t - span, t], oldest first (none before the scenario start)."""
        sc = self.sim.scenario
        last = math.floor((t - sc.start) / self._interval + 1e-9)
        first = max(0, math.floor((t - span - sc.start) / self._interval) + 1)
        return [self._scrape(k) for k in range(first, last + 1)]

    def snapshot(self, t: float) -> FleetSnapshot:
        span = max(self.lookback, self.window)
        samples = [s for s in self.scrapes(t, span) if s.scrape_ok]
        times = np.array([s.t for s in samples], dtype=np.float64)
        rows, newest_k, stamp = self._newest_present(samples, times, t)
        latest = samples[-1] if samples else self.sim.sample(t)
        pods = latest.pods
        gpu_pod = np.array([int(samples[newest_k[r]].gpu_pod[r]) for r in rows], dtype=np.int64)
        ex = exporter_rows(self.sim.scenario, self.sim.layout, latest, rows, gpu_pod, t)
        if ex is not None:  # time-sliced (virtual GPUs) and MIG GPUs: the exporter's rows
            gpu_pod = ex.pod.astype(np.int64)
        src = None if ex is None else ex.src
        at = rows if src is None else rows[src]
        stamp_rows = stamp if src is None else stamp[src]
        gpus = self._gpu_columns(at, ex, pods, gpu_pod, stamp_rows)
        on_mig = None if ex is None else ex.on_mig
        metrics = self._metric_columns(samples, times, t, newest_k, at, stamp_rows, on_mig)
        return self._builder.build(
            t,
            gpus,
            metrics,
            nodes=self._nodes(t),
            pods=tuple(_pod(p, t) for p in pods),
            steps=self._steps(samples, times, t, pods),
            exporters=self._exporter_health(samples, times, latest),
        )

    def _newest_present(
        self, samples: list[Sample], times: FloatArray, t: float
    ) -> tuple[Index, Index, FloatArray]:
        """GPUs with a sample within the lookback (series-level staleness), per GPU the index of
        its newest present scrape, and those GPUs' sample times."""
        n = self.sim.n_gpu
        in_lookback = fresh(times, t, self.lookback, SEMANTICS.left_open)
        present = np.array([s.present for s in samples], dtype=bool).reshape(len(samples), n)
        present_lb = present & in_lookback[:, None]
        has = present_lb.any(axis=0)
        newest_k = (
            present_lb.shape[0] - 1 - np.argmax(present_lb[::-1], axis=0)
            if samples
            else (np.zeros(n, dtype=np.int64))
        )
        rows = np.flatnonzero(has)
        stamp = times[newest_k[rows]] if samples else np.zeros(0)
        return rows, newest_k, stamp

    def _gpu_columns(
        self,
        at: Index,
        ex: ExporterRows | None,
        pods: tuple[SimPod, ...],
        gpu_pod: Index,
        stamp_rows: FloatArray,
    ) -> GpuColumns:
        """The identity labels of each exported row, as the exporter's series carry them."""
        lay = self.sim.layout
        pod_name = np.array([pods[p].name if p >= 0 else "" for p in gpu_pod], dtype=object)
        pod_ns = np.array([pods[p].namespace if p >= 0 else "" for p in gpu_pod], dtype=object)
        return GpuColumns(
            uuid=lay.gpu_uuid[at],
            hostname=self._node_names[lay.gpu_node[at]],
            device_index=lay.gpu_device[at],
            model_name=lay.gpu_model[at],
            pci_bus_id=lay.gpu_pci[at],
            mig_instance=None if ex is None else ex.mig_instance,
            mig_profile=None if ex is None else ex.mig_profile,
            pod=pod_name,
            namespace=pod_ns,
            timestamp=stamp_rows,
        )

    def _metric_columns(
        self,
        samples: list[Sample],
        times: FloatArray,
        t: float,
        newest_k: Index,
        at: Index,
        stamp_rows: FloatArray,
        on_mig: BoolArray | None,
    ) -> dict[str, MetricSeries]:
        """Each field's newest value per row (and its increase for counters), plus the XID
        count columns as the collectors keep them."""
        metrics: dict[str, MetricSeries] = {}
        positions = np.arange(at.size, dtype=np.int32)
        names = list(samples[-1].metrics) if samples else []
        for name in names:
            stack = np.array([s.metrics[name] for s in samples])
            val = stack[newest_k[at], at]
            if on_mig is not None and name in UNSUPPORTED_ON_MIG:
                val = np.where(on_mig, np.nan, val)
            inc = None
            window = 0.0
            spec = BY_NAME.get(name)
            if spec is not None and spec.kind == Kind.COUNTER:
                inc = increase(times, stack, t, self.window)[at]
                window = self.window
            metrics[name] = MetricSeries(
                val, stamp_rows, row=positions, increase=inc, window_seconds=window
            )
        if samples:
            xid_total = np.zeros(self.sim.n_gpu)
            for code, arr in samples[-1].xid_counts.items():
                xid_total = xid_total + np.nan_to_num(arr)
                if bool(np.any(arr[at] > 0)):  # a code's column, as the collectors keep it
                    metrics[xid_count_column(code)] = MetricSeries(
                        np.where(arr[at] > 0, arr[at], np.nan), stamp_rows, row=positions
                    )
            metrics[XID_COUNT_METRIC] = MetricSeries(xid_total[at], stamp_rows, row=positions)
        return metrics

    def _exporter_health(
        self, samples: list[Sample], times: FloatArray, latest: Sample
    ) -> ExporterHealth:
        """Per node whether its exporter is up now and when it was last scraped."""
        up = {
            str(self._node_names[i]): bool(latest.exporter_up[i])
            for i in range(len(self.sim.layout.nodes))
        }
        last_scrape: dict[str, float] = {}
        if samples:
            ok = np.array([s.exporter_up for s in samples], dtype=bool)
            seen = ok.any(axis=0)
            newest = ok.shape[0] - 1 - np.argmax(ok[::-1], axis=0)
            last_scrape = {
                str(self._node_names[i]): float(times[newest[i]]) for i in np.flatnonzero(seen)
            }
        return ExporterHealth(
            up=up if samples and samples[-1] is latest else {},
            last_scrape=last_scrape,
            scrape_interval=self._interval,
        )

    def _nodes(self, t: float) -> tuple[Node, ...]:
        """The nodes as kube-state-metrics shows them at `t`: GPU capacity, and allocatable
        minus the devices the device plugin marked Unhealthy (rebuilt only when that changes)."""
        key = tuple(sorted(unhealthy_at(self._faults, t)))
        if self._nodes_at is None or self._nodes_at[0] != key:
            alloc = gpu_allocatable_at(self._faults, self.sim.layout, t)
            nodes = tuple(
                Node(
                    NodeName(n.name),
                    labels=dict(n.labels),
                    conditions={"Ready": "True"},
                    gpu_capacity=n.gpus,
                    gpu_allocatable=alloc[n.name],
                )
                for n in self.sim.layout.nodes
            )
            self._nodes_at = (key, nodes)
        return self._nodes_at[1]

    def _steps(
        self, samples: list[Sample], times: FloatArray, t: float, pods: tuple[SimPod, ...]
    ) -> PodSeries | None:
        if not samples:
            return None
        stack = np.array([s.pod_steps for s in samples])
        latest = stack[-1]
        keep = ~np.isnan(latest)
        if not keep.any():
            return None
        inc = increase(times, stack, t, self.window)
        idx = np.flatnonzero(keep)
        return PodSeries(
            namespace=np.array([pods[i].namespace for i in idx], dtype=object),
            pod=np.array([pods[i].name for i in idx], dtype=object),
            value=latest[idx],
            timestamp=np.full(idx.size, times[-1]),
            increase=inc[idx],
        )


def _pod(p: SimPod, t: float) -> Pod:
    phase = (
        "Pending" if t < p.start else "Succeeded" if p.end is not None and t >= p.end else "Running"
    )
    return Pod(
        namespace=p.namespace,
        name=p.name,
        node=NodeName(p.node),
        phase=phase,
        labels=dict(p.labels),
        owner_kind=p.owner_kind,
        owner_name=p.owner_name,
        priority_class=p.priority_class,
    )
