"""The label layouts real clusters have, through a real Prometheus (issue 11).

When Prometheus scrapes dcgm-exporter through a ServiceMonitor without `honorLabels`, the
workload's labels arrive as `exported_pod`/`exported_namespace`/`exported_container`, and
`pod`/`namespace`/`container` name the exporter. With the exporter's Kubernetes mapping off,
only the exporter's labels arrive. The demo scenario is backfilled in each layout and replayed:
the job-level findings (straggler, hang, idle-allocated GPUs) must equal the usual layout's, and
no GPU may ever be attributed to the exporter's own pod.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from backtesting.replayer import replay
from detectors.suite import DetectorSuite
from observer.fleet.model import Pod
from observer.prometheus import PrometheusCollector, PromSettings
from observer.prometheus.parse import pod_labels_note, workload_labels
from observer.snapshot.kube_records import pod_from_api
from simulator.engine import FleetSimulator
from simulator.kube_api.pods import set_running, set_scheduled, workload_pod
from simulator.openmetrics import OpenMetricsWriter
from simulator.scenario import demo_scenario
from tests.prometheus_fixture import PrometheusFactory

MIN = 60.0
EXPORTER = "nvidia-dcgm-exporter-"


def test_workload_labels_read_both_layouts_and_never_the_exporter() -> None:
    exporter = {"pod": "nvidia-dcgm-exporter-n1", "namespace": "gpu-operator", "UUID": "a"}
    exported = [
        {**exporter, "exported_pod": "train-0", "exported_namespace": "ml"},
        {**exporter, "UUID": "b"},  # not allocated: only the exporter's labels
    ]
    labels, layout = workload_labels(exported, "auto", ())
    assert layout == "exported"
    assert labels[0]["pod"] == "train-0" and labels[0]["namespace"] == "ml"
    assert "pod" not in labels[1] and "exported_pod" not in labels[0]
    # honorLabels on, the unallocated GPU still carries the target's pod: `up` names it
    direct = [{"UUID": "a", "pod": "train-0", "namespace": "ml"}, {**exporter, "UUID": "b"}]
    labels, layout = workload_labels(direct, "auto", {("gpu-operator", exporter["pod"])})
    assert layout == "direct" and labels[0]["pod"] == "train-0" and "pod" not in labels[1]
    labels, layout = workload_labels([{**exporter}], "auto", {("gpu-operator", exporter["pod"])})
    assert layout == "none" and "pod" not in labels[0]
    assert workload_labels(direct, "none", ())[0][0] == {"UUID": "a"}
    with pytest.raises(ValueError, match="pod_labels: expected one of"):
        PromSettings("http://x", pod_labels="sideways")


def _findings(
    factory: PrometheusFactory, tmp_path: Path, layout: str
) -> tuple[set[tuple[str, str | None, str | None, str | None]], set[str]]:
    sc = demo_scenario()
    om = tmp_path / f"demo-{layout}.om"
    t0, t1 = sc.start + 30 * MIN, sc.start + 90 * MIN
    OpenMetricsWriter(FleetSimulator(sc), pod_labels=layout).write(om, t0 - 10 * MIN, t1)
    prom = factory(om)
    step = sc.scrape_interval
    with PrometheusCollector(PromSettings(prom.url)) as collector:
        snaps = [r.snapshot for r in collector.collect_range(t0, t1, step)]
        layouts = set(collector.pod_layouts)
    for snap in snaps:
        names = {p.name for p in snap.pods}
        assert not any(n.startswith(EXPORTER) for n in names), "a GPU given to the exporter"
    pods = np.concatenate([np.asarray(s.gpus.pod_index) for s in snaps])
    assert (pods >= 0).any(), "no GPU attributed to a pod"
    result = replay(DetectorSuite.default(), ((s.taken_at, s) for s in snaps))
    assert result.failures == ()
    return {f.entity for f in result.episodes}, layouts


@pytest.mark.prometheus
@pytest.mark.slow
def test_job_level_detection_is_the_same_in_the_exported_layout(
    prometheus_factory: PrometheusFactory, tmp_path: Path
) -> None:
    direct, seen_direct = _findings(prometheus_factory, tmp_path, "direct")
    exported, seen_exported = _findings(prometheus_factory, tmp_path, "exported")
    assert seen_direct == {"direct"} and seen_exported == {"exported"}
    kinds = {k for k, *_ in direct}
    assert {"straggler", "nccl_hang", "gpu_idle"} <= kinds, kinds
    assert exported == direct


def _api_pods(sim: FleetSimulator, t: float) -> list[Pod]:
    """The running workload pods as the Kubernetes collector reads them from the API."""
    out = []
    for p in sim.sample(t).pods:
        if p.start <= t < (p.end or float("inf")):
            obj = workload_pod(p, ts=p.start, owner_uid="u", pool=None)
            set_scheduled(obj, p.node, p.start)
            set_running(obj, p.start, "10.0.0.1")
            out.append(pod_from_api(obj))
    return out


@pytest.mark.prometheus
def test_without_pod_labels_gpus_are_attributed_by_node_where_certain(
    prometheus_factory: PrometheusFactory, tmp_path: Path
) -> None:
    """The exporter's Kubernetes mapping off: the summary says so, whole-node pods are
    attributed from the Kubernetes API, shared nodes stay unattributed, the exporter never."""
    sc = demo_scenario()
    sim = FleetSimulator(sc)
    t = sc.start + 30 * MIN
    om = tmp_path / "demo-none.om"
    OpenMetricsWriter(FleetSimulator(sc), pod_labels="none").write(om, t - 10 * MIN, t)
    prom = prometheus_factory(om)
    pods = _api_pods(sim, t)
    with PrometheusCollector(PromSettings(prom.url)) as collector:
        snap = collector.collect(t, pods=pods).snapshot
        assert collector.pod_layouts == {"none"}
        assert "NONE" in pod_labels_note(collector.pod_layouts)
    held = {snap.pods[i].name for i in snap.gpus.pod_index.tolist() if i >= 0}
    whole_node = {p.name for p in pods if p.gpus == 8}
    shared = {p.name for p in pods if p.gpus < 8}
    assert whole_node and held == whole_node, (held, whole_node)
    assert not held & shared and not any(n.startswith(EXPORTER) for n in held)
    job_gpus = np.asarray(snap.gpus.job_index) >= 0
    assert job_gpus.sum() == 8 * len(whole_node)
