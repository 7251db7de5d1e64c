"""The simulated fleet as scrape endpoints: dcgm-exporter per node, kube-state-metrics, steps.

Text is Prometheus exposition format 0.0.4, what the real exporters serve, with their label
names. The kube-state-metrics view takes the live placement and cordon set, so serve mode shows
what the simulated Kubernetes API shows. `OpenMetricsWriter` (re-exported here) writes the same
series with timestamps for backfill.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import numpy as np

from observer.fleet.catalog import METRICS, STEPS_METRIC, XID_COUNT_METRIC
from simulator import mig_series, vgpu_series
from simulator.engine import XID_COUNT_WINDOW, Sample
from simulator.kube_series import (
    KUBE_HELP,
    STEPS_HELP,
    active_pods,
    kube_state_series,
    steps_series,
)
from simulator.layout import Layout, SimNode, SimPod
from simulator.openmetrics import OpenMetricsWriter, WriteStats
from simulator.scenario import Exporter
from simulator.series import (
    FLOAT_FAMILIES,
    gpu_static_labels,
    pod_label_part,
    sample_lines,
)
from simulator.xid_series import XID_COUNT_HELP, count_kind, count_lines, gauge_labels

XID_GAUGE = "DCGM_FI_DEV_XID_ERRORS"


def _family(name: str, help_: str, kind: str, lines: str) -> str:
    return f"# HELP {name} {help_}\n# TYPE {name} {kind}\n{lines}" if lines else ""


def dcgm_text(
    sample: Sample,
    layout: Layout,
    node: str,
    pod_labels: str = "direct",
    fields: Collection[str] | None = None,
    exporter: Exporter | None = None,
    instances: mig_series.Instances | None = None,
) -> str:
    """One node's dcgm-exporter /metrics (only the GPUs whose series are present).
    `pod_labels="none"`: the exporter's Kubernetes mapping off (no pod labels); `exported`:
    the workload as `exported_*`, as a relabelling proxy would show it. `fields`: only these
    families, as an exporter with that counters file serves them (None: every catalog field
    and the XID counter; observer.fleet.field_presence.SHIPPED_DEFAULT_FIELDS: the shipped file).
    `exporter`: the version's layout of the XID series (None: `simple`). `instances`: the MIG
    GPUs' instances at the sample's time (simulator.mig_series.instances_at)."""
    exp = exporter if exporter is not None else Exporter()
    pos = layout.node_position()[node]
    gpus = np.flatnonzero(layout.gpu_node == pos)
    static = gpu_static_labels(layout, gpus.tolist(), exp.hostname)
    labels = [
        s if (k := int(sample.gpu_pod[g])) < 0 else s + pod_label_part(sample.pods[k], pod_labels)
        for s, g in zip(static, gpus.tolist(), strict=True)
    ]
    if exp.virtual_gpus:  # one series per pod on a time-sliced GPU (simulator.vgpu_series)
        held = vgpu_series.holders(layout, sample.pods, sample.t, node)
        labels, rows = vgpu_series.expand(
            labels, gpus.tolist(), sample.gpu_pod, sample.pods, held, pod_labels
        )
        gpus = gpus[rows]
    on_mig = np.zeros(len(labels), dtype=bool)
    if instances:  # MIG GPUs: one series per GPU instance (simulator.mig_series)
        labels, rows, on_mig = mig_series.expand(labels, gpus.tolist(), instances)
        gpus = gpus[rows]
    parts: list[str] = []
    for m in METRICS:
        if fields is not None and m.name not in fields:
            continue
        values = sample.metrics[m.name][gpus]
        if m.name in mig_series.UNSUPPORTED_ON_MIG and on_mig.any():
            values = np.where(on_mig, np.nan, values)
        labs = gauge_labels(labels, values, exp) if m.name == XID_GAUGE else labels
        lines = sample_lines(m.name, labs, values, m.name not in FLOAT_FAMILIES)
        parts.append(_family(m.name, m.help, m.exposed_kind.value, lines))
    if not exp.xid_count or (fields is not None and XID_COUNT_METRIC not in fields):
        return "".join(parts)
    present = sample.present[gpus].tolist()
    seed = int(sample.t * 1000) ^ pos
    xid_lines, _ = count_lines(
        XID_COUNT_METRIC, labels, present, sample.xid_counts, gpus.tolist(), exp,
        XID_COUNT_WINDOW, seed,
    )  # fmt: skip
    parts.append(_family(XID_COUNT_METRIC, XID_COUNT_HELP, count_kind(exp), xid_lines))
    return "".join(parts)


def kube_state_text(
    sample: Sample,
    nodes: Sequence[SimNode],
    pods: Sequence[SimPod] | None = None,
    unschedulable: Collection[str] = (),
    cluster: str = "sim",
    pod_uids: Mapping[str, str] | None = None,
    gpu_allocatable: Mapping[str, int] | None = None,
) -> str:
    """kube-state-metrics /metrics for the live placement, cordon set and GPUs the device
    plugin still advertises."""
    series = kube_state_series(
        sample, nodes, pods, unschedulable, cluster, pod_uids, gpu_allocatable
    )
    parts = []
    for name, rows in series.items():
        lines = "".join(f"{name}{{{lab}}} {int(v)}\n" for lab, v in rows)
        parts.append(_family(name, KUBE_HELP[name], "gauge", lines))
    return "".join(parts)


def steps_text(sample: Sample, pods: Sequence[SimPod] | None = None) -> str:
    """`training_steps_total{namespace,pod}` of every active pod that exports it."""
    lines = "".join(f"{STEPS_METRIC}{{{lab}}} {int(v)}\n" for lab, v in steps_series(sample, pods))
    return _family(STEPS_METRIC, STEPS_HELP, "counter", lines)


__all__ = [
    "OpenMetricsWriter",
    "WriteStats",
    "active_pods",
    "dcgm_text",
    "kube_state_series",
    "kube_state_text",
    "steps_series",
    "steps_text",
]
