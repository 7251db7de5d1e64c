"""PromQL answers -> the snapshot builder's inputs (GpuColumns, MetricSeries, PodSeries, ...).

The Prometheus collector's answers are JSON vectors (`[{"metric": {...}, "value": [t, "v"]}]`);
this module turns each into columns with one pass over the series, and applies the few rules
that make a Prometheus snapshot equal to a direct-scrape one: error counters that came back only
where non-zero are 0 (not NaN) for GPUs that report, and so is the XID count; a family that no
GPU reports stays NaN ("not collected"). Pure functions; no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from itertools import repeat
from typing import Any

import numpy as np

from observer.fleet.catalog import (
    LABEL_HOSTNAME,
    LABEL_HOSTNAME_NEW,
    LABEL_MIG_INSTANCE,
    LABEL_NAMESPACE,
    LABEL_POD,
    LABEL_UUID,
    LABEL_XID,
    XID_COUNT_METRIC,
    canonical_name,
    xid_count_column,
)
from observer.fleet.model import FloatArray, Pod, StrArray
from observer.prometheus.plan import IDENTITY_LABELS, TS_LABEL
from observer.snapshot.inputs import GpuColumns, MetricSeries, PodSeries, keys_list

Vector = Sequence[Mapping[str, Any]]
"""An instant vector as the HTTP API returns it."""
NODE_LABELS = ("node", "kubernetes_node", "nodename", LABEL_HOSTNAME, LABEL_HOSTNAME_NEW)
"""Labels that may name the node of an `up` series, before falling back to `instance`."""


def values(vector: Vector) -> FloatArray:
    return np.fromiter((float(r["value"][1]) for r in vector), dtype=np.float64, count=len(vector))


def objects(items: Sequence[str] | StrArray) -> StrArray:
    """Label strings as an object array, without str_column's per-item check (JSON labels are
    always strings): ~2x faster on the 150k values of a 10k-GPU cycle."""
    if isinstance(items, np.ndarray):
        return items
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


def label(vector: Vector, name: str) -> StrArray:
    return objects([r["metric"].get(name, "") for r in vector])


def identity(current: Vector, vanished: Vector) -> GpuColumns:
    """GPU rows: current label sets valued by their sample time; vanished ones with NaN time."""
    rows = [*current, *vanished]
    cols = {name: label(rows, name) for name in IDENTITY_LABELS}
    stamp = np.concatenate([values(current), np.full(len(vanished), np.nan)])
    return GpuColumns.from_labels(cols, stamp)


Columns = tuple[list[str], list[str], FloatArray]
"""(UUIDs, MIG instance ids, values) of one family, parallel lists."""


def columns(vector: Vector) -> Columns:
    """One pass over a per-GPU vector: UUIDs, MIG ids and values."""
    uuid: list[str] = []
    mig: list[str] = []
    val: list[float] = []
    for r in vector:
        m = r["metric"]
        uuid.append(m.get(LABEL_UUID, ""))
        mig.append(m.get(LABEL_MIG_INSTANCE, ""))
        val.append(float(r["value"][1]))
    return uuid, mig, np.asarray(val, dtype=np.float64)


def gpu_series(
    vector: Vector | Columns,
    stamp_of: Mapping[str, float],
    window: float = 0.0,
    as_increase: bool = False,
) -> MetricSeries:
    """A per-GPU vector keyed by UUID (+ GPU_I_ID); the sample time is the GPU's (identity)."""
    uuid_l, mig_l, val_l = vector if isinstance(vector, tuple) else columns(vector)
    keys = uuid_l
    if any(mig_l):
        keys = [u if not m else f"{u}/{m}" for u, m in zip(uuid_l, mig_l, strict=True)]
    stamp = np.fromiter(map(stamp_of.get, keys, repeat(np.nan, len(keys))), np.float64, len(keys))
    uuid, mig = objects(uuid_l), objects(mig_l)
    v = np.asarray(val_l, dtype=np.float64)
    if as_increase:
        return MetricSeries(np.full(len(v), np.nan), stamp, uuid, mig, increase=v,
                            window_seconds=window)  # fmt: skip
    return MetricSeries(v, stamp, uuid, mig)


def newest_pods(current: Vector) -> dict[str, str] | None:
    """GPU key -> the pod label of its newest identity row, for the GPUs that have more than one
    label set (an old pod's series lingers); None when no GPU has (nothing to filter)."""
    best: dict[str, tuple[float, str]] = {}
    for r in current:
        m = r["metric"]
        uuid, mig = m.get(LABEL_UUID, ""), m.get(LABEL_MIG_INSTANCE, "")
        key = f"{uuid}/{mig}" if mig else uuid
        t = float(r["value"][1])
        if key not in best or t > best[key][0]:
            best[key] = (t, m.get(LABEL_POD, ""))
    if len(best) == len(current):
        return None
    seen: set[str] = set()
    twice: set[str] = set()
    for r in current:
        m = r["metric"]
        uuid, mig = m.get(LABEL_UUID, ""), m.get(LABEL_MIG_INSTANCE, "")
        key = f"{uuid}/{mig}" if mig else uuid
        (twice if key in seen else seen).add(key)
    return {k: best[k][1] for k in twice}  # only GPUs with two label sets need a filter


def family_rows(
    vectors: Sequence[Vector], newest_pod: Mapping[str, str] | None
) -> dict[str, Columns]:
    """Value answers as columns per family (aliases folded), in one pass. With `newest_pod`,
    only each GPU's current pod's series are kept (None: no GPU has two label sets)."""
    out: dict[str, tuple[list[str], list[str], list[str]]] = {}
    pods = newest_pod or {}
    for vector in vectors:
        for r in vector:
            m = r["metric"]
            uuid = m.get(LABEL_UUID, "")
            mig = m.get(LABEL_MIG_INSTANCE, "")
            if pods:
                pod = pods.get(f"{uuid}/{mig}" if mig else uuid)
                if pod is not None and m.get(LABEL_POD, "") != pod:
                    continue  # a lingering series of the GPU's previous pod
            cols = out.get(m.get("__name__", ""))
            if cols is None:
                cols = out[m.get("__name__", "")] = ([], [], [])
            cols[0].append(uuid)
            cols[1].append(mig)
            cols[2].append(r["value"][1])  # numbers as text: numpy converts a column at once
    merged: dict[str, Columns] = {}
    for name, (u, g, v) in out.items():  # fold aliases (CLOCKS_EVENT_REASONS -> THROTTLE)
        canon = canonical_name(name)
        values = np.asarray(v, dtype=np.float64)
        if canon in merged:
            a = merged[canon]
            merged[canon] = (a[0] + u, a[1] + g, np.concatenate([a[2], values]))
        else:
            merged[canon] = (u, g, values)
    return merged


def present_families(names: Sequence[Any]) -> set[str]:
    return {canonical_name(str(n)) for n in names}


def fresh_xid_counts(vector: Vector, stamp_of: Mapping[str, float]) -> dict[str, Vector]:
    """XID count series whose own sample is as new as their GPU's newest, as one vector per
    snapshot column: the GPU's total (`XID_COUNT_METRIC`) and each code's count
    (`xid_count_column`). A code seen by several series of one GPU (one per pod sharing it,
    with `vgpu`) counts once."""
    stamps: dict[tuple[tuple[str, str], ...], float] = {}
    for r in vector:
        m = r["metric"]
        if m.get(TS_LABEL):
            key = tuple(sorted((k, v) for k, v in m.items() if k != TS_LABEL))
            stamps[key] = float(r["value"][1])
    by_code: dict[tuple[str, str, str], float] = {}
    for r in vector:
        m = r["metric"]
        if m.get(TS_LABEL):
            continue
        key = tuple(sorted((k, v) for k, v in m.items() if k != "__name__"))
        uuid, mig = m.get(LABEL_UUID, ""), m.get(LABEL_MIG_INSTANCE, "")
        gpu = f"{uuid}/{mig}" if mig else uuid
        if stamps.get(key, -np.inf) >= stamp_of.get(gpu, np.inf):
            at = (uuid, mig, m.get(LABEL_XID, ""))
            by_code[at] = max(by_code.get(at, 0.0), float(r["value"][1]))
    total: dict[tuple[str, str], float] = {}
    out: dict[str, list[Mapping[str, Any]]] = {}
    for (u, g, code), v in by_code.items():
        total[(u, g)] = total.get((u, g), 0.0) + v
        if code:
            out.setdefault(xid_count_column(code), []).append(_row(u, g, v))
    if total:
        out[XID_COUNT_METRIC] = [_row(u, g, v) for (u, g), v in total.items()]
    return dict(out)


def _row(uuid: str, mig: str, v: float) -> Mapping[str, Any]:
    return {"metric": {LABEL_UUID: uuid, LABEL_MIG_INSTANCE: mig}, "value": [0, repr(v)]}


def merge_counter(value: MetricSeries | None, inc: MetricSeries | None) -> MetricSeries | None:
    """One counter column: latest value and increase, joined on the GPU key."""
    if value is None or inc is None:
        return value if value is not None else inc
    assert value.uuid is not None and inc.uuid is not None
    at = {k: i for i, k in enumerate(keys_list(inc.uuid, inc.mig_instance))}
    assert inc.increase is not None
    pos = [at.get(k, -1) for k in keys_list(value.uuid, value.mig_instance)]
    idx = np.asarray(pos, dtype=np.intp)
    increase = np.where(idx >= 0, inc.increase[np.maximum(idx, 0)], np.nan)
    return MetricSeries(
        value.value, value.timestamp, value.uuid, value.mig_instance,
        increase=increase, window_seconds=inc.window_seconds,
    )  # fmt: skip


def pod_series(steps: Vector, increase: Vector) -> PodSeries | None:
    if not steps:
        return None
    inc = {(r["metric"].get(LABEL_NAMESPACE, ""), r["metric"].get(LABEL_POD, "")): float(
        r["value"][1]) for r in increase}  # fmt: skip
    ns, pod = label(steps, LABEL_NAMESPACE), label(steps, LABEL_POD)
    keys = zip(ns.tolist(), pod.tolist(), strict=True)
    return PodSeries(
        namespace=ns,
        pod=pod,
        value=values(steps),
        timestamp=np.array([float(r["value"][0]) for r in steps]),
        increase=np.array([inc.get(k, np.nan) for k in keys]),
    )


PodNodes = Mapping[tuple[str, str], str]
"""(namespace, pod) -> node, from the snapshot's pod records."""


def pod_nodes(pods: Sequence[Pod]) -> dict[tuple[str, str], str]:
    return {(p.namespace, p.name): str(p.node) for p in pods if p.node}


def node_of(
    m: Mapping[str, str], known_nodes: set[str], pods: PodNodes | None = None
) -> str | None:
    """The node an `up`-like series is about: a node label, else the `instance` host, else the
    node of the exporter pod it names (`namespace`/`pod`, as Kubernetes pod discovery labels
    it when `instance` is a pod IP)."""
    name = next((m[k] for k in NODE_LABELS if m.get(k) in known_nodes), None)
    if name is None:
        host = str(m.get("instance", "")).rsplit(":", 1)[0]
        name = host if host in known_nodes else None
    if name is None and pods and m.get(LABEL_POD):
        node = pods.get((m.get(LABEL_NAMESPACE, ""), m[LABEL_POD]))
        name = node if node in known_nodes else None
    return name


def exporter_up(
    vector: Vector, known_nodes: set[str], pods: PodNodes | None = None
) -> tuple[dict[str, bool], int]:
    """Node -> up == 1 from `up` series, and how many series named no known node."""
    up: dict[str, bool] = {}
    unmapped = 0
    for r in vector:
        name = node_of(r["metric"], known_nodes, pods)
        if name is None:
            unmapped += 1
            continue
        up[name] = up.get(name, False) or float(r["value"][1]) == 1.0
    return up, unmapped


def last_up(
    vector: Vector, known_nodes: set[str], pods: PodNodes | None = None
) -> dict[str, float]:
    """Node -> the last time its exporter answered a scrape (`up_last`)."""
    out: dict[str, float] = {}
    for r in vector:
        name = node_of(r["metric"], known_nodes, pods)
        if name is not None:
            out[name] = max(out.get(name, -np.inf), float(r["value"][1]))
    return out


_WORKLOAD = (LABEL_POD, LABEL_NAMESPACE, "container")
_EXPORTED = tuple(f"exported_{k}" for k in _WORKLOAD)


def pod_label_layout(series: Sequence[Mapping[str, str]], mode: str) -> str:
    """`direct`, `exported` or `none` for one answer's label sets. `auto`: `exported` when any
    series carries `exported_pod`/`exported_namespace` (Prometheus scraped dcgm-exporter without
    `honorLabels`, so `pod`/`namespace`/`container` name the exporter), else `direct`."""
    if mode != "auto":
        return mode
    exported = any(_EXPORTED[0] in m or _EXPORTED[1] in m for m in series)
    return "exported" if exported else "direct"


def workload_labels(
    series: Sequence[Mapping[str, str]], mode: str, exporter_pods: Collection[tuple[str, str]]
) -> tuple[list[dict[str, str]], str]:
    """Label sets whose `pod`/`namespace`/`container` name the workload holding the GPU, or
    are absent; and the layout read (`pod_label_layout`). A pod in `exporter_pods` (namespace,
    name: the exporters' own, from `up`) is never a GPU's workload."""
    layout = pod_label_layout(series, mode)
    out: list[dict[str, str]] = []
    for m in series:
        d = {k: v for k, v in m.items() if k not in _EXPORTED and k not in _WORKLOAD}
        if layout == "exported":
            d.update({k: m[e] for k, e in zip(_WORKLOAD, _EXPORTED, strict=True) if m.get(e)})
        elif layout == "direct" and (
            (m.get(LABEL_NAMESPACE, ""), m.get(LABEL_POD, "")) not in exporter_pods
        ):
            d.update({k: m[k] for k in _WORKLOAD if m.get(k)})
        out.append(d)
    if layout == "direct" and out and not any(LABEL_POD in d for d in out):
        layout = "none"  # no GPU names a workload: attribute by node from Kubernetes
    return out, layout


def exporter_pods_of(up: Vector) -> set[tuple[str, str]]:
    """(namespace, pod) of the exporters themselves: Prometheus' target labels on `up`; also
    ("", pod), as the `values:*` answers keep the pod but not its namespace."""
    named = [(m.get(LABEL_NAMESPACE, ""), m[LABEL_POD]) for m in (r["metric"] for r in up)
             if m.get(LABEL_POD)]  # fmt: skip
    return {*named, *(("", pod) for _, pod in named)}


WORKLOAD_ANSWERS = ("identity", "vanished", "xid_count")
"""Answers besides `values:*` whose label sets name pods on DCGM series."""


def workload_answers(
    answers: Mapping[str, list[dict[str, Any]] | None], mode: str
) -> tuple[dict[str, list[dict[str, Any]] | None], set[str]]:
    """The DCGM answers with workload pod labels (`workload_labels`), and the layout the
    `identity` answer (the one that attributes GPUs to pods) was read in."""
    exporters = exporter_pods_of(answers.get("up") or [])
    out = dict(answers)
    layouts: set[str] = set()
    for name, vector in answers.items():
        if not vector or not (name in WORKLOAD_ANSWERS or name.startswith("values:")):
            continue
        labels, layout = workload_labels([r["metric"] for r in vector], mode, exporters)
        if name == "identity":  # the answer that attributes GPUs to pods
            layouts.add(layout)
        out[name] = [{**r, "metric": m} for r, m in zip(vector, labels, strict=True)]
    return out, layouts


def pod_labels_note(layouts: Collection[str]) -> str:
    """One line for `collect --summary` and logs: where the last cycle found GPUs' pods."""
    if not layouts:
        return "pod labels: no DCGM answer"
    if "none" in layouts:
        return (
            "pod labels: NONE on DCGM series (dcgm-exporter's Kubernetes mapping off?): GPUs are "
            "attributed by node from Kubernetes only where a node has a single GPU pod; job-level "
            "detection (stragglers, hangs, idle-allocated) needs them (dcgm-exporter --kubernetes, "
            "i.e. DCGM_EXPORTER_KUBERNETES=true)"
        )
    return "pod labels: " + ", ".join(sorted(layouts))
