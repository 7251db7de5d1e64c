"""What a collector hands the snapshot builder: columns, not objects.

Both collectors (Prometheus and direct scrape) end with the same shapes, so that one builder turns
either into the same FleetSnapshot. Per-GPU data are parallel numpy columns; string columns are
object arrays (`dtype=object`) of Python strings, with "" for an absent label.

- `GpuColumns`: GPU identity rows as dcgm-exporter labels them (one row per series or per GPU;
  duplicates are fine, the builder keeps the newest row per GPU / MIG instance). Best give it the
  *inventory*: one row per GPU seen over a lookback longer than the scrape interval, so that a GPU
  whose series just vanished (XID 79) is still a row, with NaN metrics, rather than missing.
  Rows gathered from every metric's series also work (series then keyed by `row`); the builder
  deduplicates them, at some cost (docs/performance.md).
- `MetricSeries`: one metric's samples, one entry per series, keyed by GPU UUID (+ MIG instance)
  or by row of the `GpuColumns` it came with.
- `PodSeries`: a per-pod series such as `training_steps_total{namespace,pod}`.
- `ExporterHealth`: per-node exporter facts the collector knows (`up`, last scrape time) and
  the samples to infer the scrape interval from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from observer.fleet.catalog import (
    LABEL_GPU,
    LABEL_HOSTNAME,
    LABEL_HOSTNAME_NEW,
    LABEL_MIG_INSTANCE,
    LABEL_MIG_PROFILE,
    LABEL_MODEL,
    LABEL_NAMESPACE,
    LABEL_PCI_BUS_ID,
    LABEL_POD,
    LABEL_UUID,
)
from observer.fleet.model import FloatArray, IntArray, StrArray

IndexArray = npt.NDArray[np.integer[Any]]
"""Any integer dtype (`np.arange` gives int64; the snapshot stores int32)."""


def str_column(values: Iterable[object] | np.ndarray) -> StrArray:
    """An object array of str ("" for None); object arrays pass through uncopied."""
    if isinstance(values, np.ndarray) and values.dtype == object:
        return values
    items = ["" if v is None else str(v) for v in values]
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


def int_column(values: Iterable[object] | np.ndarray, default: int = -1) -> IntArray:
    """Integers from label strings ("3" -> 3); empty or malformed -> `default`."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        return values.astype(np.int32, copy=False)
    out: list[int] = []
    for v in values:
        try:
            out.append(int(str(v)))
        except ValueError:
            out.append(default)
    return np.asarray(out, dtype=np.int32)


def float_column(values: Iterable[float] | np.ndarray) -> FloatArray:
    return np.asarray(values, dtype=np.float64)


NODE_HINT_LABELS = ("node", "kubernetes_node")
"""Labels Prometheus' Kubernetes service discovery is commonly relabelled to carry the scrape
target pod's `spec.nodeName` (`__meta_kubernetes_pod_node_name`); when present they name the
GPU's node, whatever the exporter's own `Hostname` says (the later one wins)."""


@dataclass(frozen=True, slots=True)
class GpuColumns:
    """GPU identity rows as parallel columns (dcgm-exporter labels)."""

    uuid: StrArray
    hostname: StrArray
    device_index: IndexArray
    model_name: StrArray
    pci_bus_id: StrArray | None = None
    mig_instance: StrArray | None = None
    """`GPU_I_ID` ("" for a whole GPU)."""
    mig_profile: StrArray | None = None
    pod: StrArray | None = None
    """`pod` label of an allocated GPU ("" when unallocated)."""
    namespace: StrArray | None = None
    timestamp: FloatArray | None = None
    """Sample time of the series each row came from; among duplicate rows the newest wins."""

    def __post_init__(self) -> None:
        _same_length(
            "GpuColumns",
            uuid=self.uuid,
            hostname=self.hostname,
            device_index=self.device_index,
            model_name=self.model_name,
            pci_bus_id=self.pci_bus_id,
            mig_instance=self.mig_instance,
            mig_profile=self.mig_profile,
            pod=self.pod,
            namespace=self.namespace,
            timestamp=self.timestamp,
        )

    def __len__(self) -> int:
        return int(self.uuid.shape[0])

    @classmethod
    def from_labels(
        cls,
        labels: Mapping[str, Sequence[str] | np.ndarray],
        timestamp: Sequence[float] | FloatArray | None = None,
    ) -> GpuColumns:
        """From label-name -> column, accepting `Hostname` and/or `hostname` (row by row)."""
        uuid = str_column(labels[LABEL_UUID])
        n = len(uuid)
        old = labels.get(LABEL_HOSTNAME)
        new = labels.get(LABEL_HOSTNAME_NEW)
        if old is not None and new is not None:
            old_col, new_col = str_column(old), str_column(new)
            hostname = np.where(old_col != "", old_col, new_col)
        elif old is not None:
            hostname = str_column(old)
        elif new is not None:
            hostname = str_column(new)
        else:
            hostname = np.full(n, "", dtype=object)
        for hint in NODE_HINT_LABELS:  # the exporter pod's spec.nodeName, relabelled by SD
            col = labels.get(hint)
            if col is not None:
                given = str_column(col)
                hostname = np.where(given != "", given, hostname)

        def opt(name: str) -> StrArray | None:
            col = labels.get(name)
            return None if col is None else str_column(col)

        gpu = labels.get(LABEL_GPU)
        return cls(
            uuid=uuid,
            hostname=hostname,
            device_index=np.full(n, -1, np.int32) if gpu is None else int_column(gpu),
            model_name=str_column(labels[LABEL_MODEL]) if LABEL_MODEL in labels else _empty(n),
            pci_bus_id=opt(LABEL_PCI_BUS_ID),
            mig_instance=opt(LABEL_MIG_INSTANCE),
            mig_profile=opt(LABEL_MIG_PROFILE),
            pod=opt(LABEL_POD),
            namespace=opt(LABEL_NAMESPACE),
            timestamp=None if timestamp is None else float_column(timestamp),
        )

    @classmethod
    def from_label_dicts(
        cls,
        rows: Sequence[Mapping[str, str]],
        timestamp: Sequence[float] | FloatArray | None = None,
    ) -> GpuColumns:
        """From one label dict per series (what a PromQL result or a parsed exposition gives)."""
        names = (
            LABEL_UUID,
            LABEL_HOSTNAME,
            LABEL_HOSTNAME_NEW,
            LABEL_GPU,
            LABEL_MODEL,
            LABEL_PCI_BUS_ID,
            LABEL_MIG_INSTANCE,
            LABEL_MIG_PROFILE,
            LABEL_POD,
            LABEL_NAMESPACE,
        )
        hints = tuple(h for h in NODE_HINT_LABELS if any(h in r for r in rows))
        cols = {name: [r.get(name, "") for r in rows] for name in (*names, *hints)}
        return cls.from_labels(cols, timestamp)

    def mig_keys(self) -> StrArray:
        """`UUID` for whole GPUs, `UUID/GPU_I_ID` for MIG instances: the GPU row key."""
        return gpu_keys(self.uuid, self.mig_instance)


def _same_length(what: str, **columns: np.ndarray | None) -> None:
    lengths = {name: len(col) for name, col in columns.items() if col is not None}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"{what} columns differ in length: {lengths}")


def _empty(n: int) -> StrArray:
    return np.full(n, "", dtype=object)


def gpu_keys(uuid: StrArray, mig_instance: StrArray | None) -> StrArray:
    """Row keys: the UUID itself when no row is a MIG instance (no copy)."""
    if mig_instance is None:
        return uuid
    mig = mig_instance != ""
    if not mig.any():
        return uuid
    out = uuid.copy()
    out[mig] = uuid[mig] + "/" + mig_instance[mig]
    return out


@dataclass(frozen=True, slots=True)
class MetricSeries:
    """One metric's newest samples, one entry per series.

    Key the series either by `uuid` (+ `mig_instance`) or by `row`, a position in the
    `GpuColumns` given to the same build. `increase` (counters) is the reset-aware increase over
    `window_seconds`; `span`, when given, the seconds each entry's increase actually covers
    (>= the window: after a gap or a cold start it may cover more; None: the window).
    """

    value: FloatArray
    timestamp: FloatArray
    uuid: StrArray | None = None
    mig_instance: StrArray | None = None
    row: IndexArray | None = None
    increase: FloatArray | None = None
    window_seconds: float = 0.0
    span: FloatArray | None = None

    def __post_init__(self) -> None:
        if (self.uuid is None) == (self.row is None):
            raise ValueError("MetricSeries needs exactly one of `uuid` or `row`")
        _same_length(
            "MetricSeries",
            value=self.value,
            timestamp=self.timestamp,
            uuid=self.uuid,
            mig_instance=self.mig_instance,
            row=self.row,
            increase=self.increase,
            span=self.span,
        )

    def __len__(self) -> int:
        return int(self.value.shape[0])


@dataclass(frozen=True, slots=True)
class PodSeries:
    """A per-pod series (e.g. `training_steps_total`), newest sample per series."""

    namespace: StrArray
    pod: StrArray
    value: FloatArray
    timestamp: FloatArray | None = None
    increase: FloatArray | None = None


@dataclass(frozen=True, slots=True)
class ExporterHealth:
    """What the collector knows about each node's exporter and about the source as a whole."""

    up: Mapping[str, bool] = field(default_factory=dict)
    """Node name -> the exporter answered its last scrape (`up == 1`). Prometheus labels `up` by
    scrape target (`instance`), so the collector maps targets to nodes (e.g. through the
    exporter pod's node in `kube_pod_info`). Nodes named here appear even without GPU rows."""
    last_scrape: Mapping[str, float] = field(default_factory=dict)
    """Node name -> time of the exporter's last successful scrape (unix seconds)."""
    scrape_interval: float | None = None
    """Known interval (seconds); else inferred from `sample_times`, else 30 s."""
    sample_times: Sequence[npt.ArrayLike] = ()
    """Consecutive sample times of a few series (e.g. a range query's timestamps)."""
    source_ok: bool = True
    degraded_reason: str = ""


def fill_zero(
    series: MetricSeries | None,
    current: GpuColumns,
    n_current: int,
    *,
    increase: bool = False,
    window: float = 0.0,
) -> MetricSeries:
    """A sparse answer plus 0 for every currently reporting GPU it does not name."""
    uuid = current.uuid[:n_current]
    mig = None if current.mig_instance is None else current.mig_instance[:n_current]
    stamp = current.timestamp[:n_current] if current.timestamp is not None else np.zeros(n_current)
    named: set[str] = set()
    if series is not None:
        assert series.uuid is not None
        named = set(keys_list(series.uuid, series.mig_instance))
    missing = np.fromiter((k not in named for k in keys_list(uuid, mig)), bool, n_current)
    zeros = np.zeros(int(missing.sum()))
    filler = MetricSeries(
        np.full(zeros.shape[0], np.nan) if increase else zeros,
        stamp[missing],
        uuid[missing],
        None if mig is None else mig[missing],
        increase=zeros if increase else None,
        window_seconds=window,
    )
    return filler if series is None else _concat(series, filler)


def keys_list(uuid: StrArray, mig: StrArray | None) -> list[str]:
    """Row keys as a list (the UUID, `UUID/instance` for MIG instances)."""
    keys: list[str] = gpu_keys(uuid, mig).tolist()
    return keys


def _concat(a: MetricSeries, b: MetricSeries) -> MetricSeries:
    def col(x: MetricSeries, c: StrArray | None) -> StrArray:
        return c if c is not None else str_column([""] * len(x))

    assert a.uuid is not None and b.uuid is not None
    inc = None
    if a.increase is not None or b.increase is not None:
        inc = np.concatenate([_inc(a), _inc(b)])
    return MetricSeries(
        np.concatenate([a.value, b.value]),
        np.concatenate([a.timestamp, b.timestamp]),
        np.concatenate([a.uuid, b.uuid]),
        np.concatenate([col(a, a.mig_instance), col(b, b.mig_instance)]),
        increase=inc,
        window_seconds=max(a.window_seconds, b.window_seconds),
    )


def _inc(s: MetricSeries) -> FloatArray:
    return s.increase if s.increase is not None else np.full(len(s), np.nan)
