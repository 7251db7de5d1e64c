"""GPUs join their Kubernetes node when dcgm-exporter's `Hostname` is not the node's name
(issue 27, finding 6): through both collectors, and what is reported when nothing joins."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from gpufleet.doctor.check_table import OK, WARN
from gpufleet.doctor.checks import node_join_check
from observer.fleet.model import FleetSnapshot, Node, NodeName, Pod
from observer.kube.collector import KubeCollector, KubeSettings
from observer.kube.exporters import DEFAULT_EXPORTER_SELECTORS
from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.plan import PromSettings
from observer.scrape.collector import ScrapeCollector, ScrapeSettings
from observer.snapshot import GpuColumns, build_snapshot, join_hostnames, summarize, unjoined_gpus
from simulator.clock import ManualWall
from simulator.cluster import ClusterOptions
from simulator.scenario import Scenario, scenario_from_dict
from simulator.serve import start_simulation
from tests.prometheus_fixture import start_prometheus, write_scenario

NODES = ["h100-0000", "h100-0001"]


def test_join_by_exact_name_pod_case_and_short_name() -> None:
    pods = [Pod("gpu-operator", "nvidia-dcgm-exporter-x7k2p", NodeName("h100-0001"))]
    nodes = [*NODES, "a100-0000.dc1", "a100-0000.dc2"]
    join = join_hostnames(
        [
            "h100-0000",  # NODE_NAME set
            "nvidia-dcgm-exporter-x7k2p",  # the exporter pod's name: its spec.nodeName
            "H100-0000",  # case
            "h100-0001.gpu.example.internal",  # the host's FQDN
            "a100-0000",  # two nodes share the short name: no guess
            "elsewhere",
        ],
        nodes,
        pods,
    )
    assert join == {
        "h100-0000": "h100-0000",
        "nvidia-dcgm-exporter-x7k2p": "h100-0001",
        "H100-0000": "h100-0000",
        "h100-0001.gpu.example.internal": "h100-0001",
    }


def _gpus(hosts: list[str], node_label: list[str] | None = None) -> GpuColumns:
    labels: dict[str, list[str]] = {
        "UUID": [f"GPU-{i}" for i in range(len(hosts))],
        "Hostname": hosts,
        "gpu": ["0"] * len(hosts),
        "modelName": ["NVIDIA H100"] * len(hosts),
    }
    if node_label is not None:
        labels["kubernetes_node"] = node_label
    return GpuColumns.from_labels(labels, [100.0] * len(hosts))


def test_a_gpu_that_joins_no_node_is_kept_and_reported() -> None:
    k8s = [Node(NodeName(n)) for n in NODES]
    snap = build_snapshot(100.0, _gpus(["h100-0000.gpu.example.internal", "gpu-box-7"]), {},
                          nodes=k8s)  # fmt: skip
    assert len(snap.gpus) == 2
    assert unjoined_gpus(snap) == {"gpu-box-7": 1}
    text = summarize(snap)
    assert "GPUs on no Kubernetes node" in text and "gpu-box-7 (1 GPUs)" in text
    joined = snap.nodes[int(snap.gpus.node_index[snap.gpus.position("GPU-0")])]
    assert joined.name == "h100-0000" and joined.in_kubernetes
    check = node_join_check(snap)  # `gpufleet doctor`'s row
    assert (
        check.status == WARN and "1 GPUs on no Kubernetes node: gpu-box-7 (1 GPUs)" in check.detail
    )
    assert "NODE_NAME" in check.fix


def test_the_scrape_targets_node_label_wins_over_the_exporters_hostname() -> None:
    """`kubernetes_node` from Prometheus' service discovery (the exporter pod's nodeName)."""
    k8s = [Node(NodeName(n)) for n in NODES]
    gpus = _gpus(["nvidia-dcgm-exporter-abcde"], ["h100-0001"])
    snap = build_snapshot(100.0, gpus, {}, nodes=k8s)
    assert [n.name for n in snap.nodes] == NODES and unjoined_gpus(snap) == {}
    assert node_join_check(snap).status == OK


def _scenario() -> Scenario:
    return scenario_from_dict(
        {
            "name": "fqdn-hostnames",
            "duration": 1800,
            "pools": [{"name": "h100", "model": "H100", "nodes": 2, "gpus_per_node": 2}],
            "workloads": [{"name": "train", "kind": "training", "replicas": 2, "gpus_per_pod": 2}],
            "exporter": {"version": "4.x", "hostname": "fqdn"},
        }
    )


def _assert_joined(snap: FleetSnapshot) -> None:
    assert [str(n.name) for n in snap.nodes] == NODES
    assert all(n.in_kubernetes for n in snap.nodes)
    assert unjoined_gpus(snap) == {}
    assert sorted(np.bincount(snap.gpus.node_index).tolist()) == [2, 2]
    t = snap.telemetry
    assert t is not None and bool(t.node_up.all())
    assert bool(np.isfinite(t.node_last_sample).all())


def test_direct_scrape_joins_fqdn_hostnames_to_their_nodes() -> None:
    sc = _scenario()
    wall = ManualWall(sc.start + 300)
    handle = start_simulation(sc, wall=wall, options=ClusterOptions(startup_seconds=0))
    try:
        settings = ScrapeSettings(discovery_url=f"{handle.metrics_url}/targets")
        with ScrapeCollector(settings, now=handle.clock.scenario_time) as c:
            snap = c.collect().snapshot
    finally:
        handle.stop()
    _assert_joined(snap)


@pytest.mark.prometheus
def test_prometheus_joins_fqdn_hostnames_to_their_nodes(tmp_path: Path) -> None:
    sc = _scenario()
    om = write_scenario(sc, tmp_path / "fqdn.om", sc.start, sc.start + 600)
    prom = start_prometheus(om, tmp_path)
    try:
        with PrometheusCollector(PromSettings(prom.url)) as pc:
            snap = pc.collect(sc.start + 570).snapshot
    finally:
        prom.stop()
    _assert_joined(snap)


def test_direct_scrape_joins_by_the_exporter_pods_node_from_the_watch_cache(
    tmp_path: Path,
) -> None:
    """A `Hostname` that no name rule joins (`host-<hex>`: the node registered under another
    name): the exporter pod found in the Kubernetes watch cache names its `spec.nodeName`.
    On the old discovery (URLs only) both nodes' GPUs were on two nodes outside Kubernetes."""
    base = _scenario()
    exporter = base.exporter.model_copy(update={"hostname": "host"})
    sc = base.model_copy(update={"start": float(int(time.time())), "exporter": exporter})
    handle = start_simulation(sc, exporter_pods="gpu-operator",
                              kubeconfig_out=tmp_path / "kubeconfig")  # fmt: skip
    try:
        with KubeCollector(KubeSettings(kubeconfig=str(handle.kubeconfig))) as kube:
            assert kube.wait_synced(10)
            discover = lambda: kube.exporter_targets(DEFAULT_EXPORTER_SELECTORS)  # noqa: E731
            with ScrapeCollector(ScrapeSettings(), now=time.time, discover=discover) as c:
                snap = c.collect(nodes=kube.nodes(), pods=kube.pods()).snapshot
    finally:
        handle.stop()
    assert len(snap.gpus) == 4
    _assert_joined(snap)
    assert node_join_check(snap).status == OK
