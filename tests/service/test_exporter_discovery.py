"""Direct scrape finds dcgm-exporter the Kubernetes way: pods by namespace and labels from the
service's own pod watch, at their pod IP and named port, for the GPU Operator's layout and
dcgm-exporter's chart alike, with no `/targets` endpoint."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from gpufleet.config import GpufleetConfig
from gpufleet.service.assembly import build
from gpufleet.service.sources import source_settings
from harness.k8s_sim import small_scenario
from observer.kube.collector import KubeCollector, KubeSettings
from observer.kube.exporters import DEFAULT_EXPORTER_SELECTORS, exporter_urls
from remediations.policy import load_policy
from remediations.store import Store
from simulator.serve import start_simulation


def _pod(ns: str, labels: dict[str, str], ports: list[dict[str, Any]], ip: str | None = "10.1.2.3",
         phase: str = "Running") -> dict[str, Any]:  # fmt: skip
    return {
        "metadata": {"namespace": ns, "name": f"p-{len(ports)}", "labels": labels},
        "spec": {"containers": [{"name": "exporter", "ports": ports}]},
        "status": {"phase": phase, "podIP": ip},
    }


def test_defaults_cover_the_gpu_operator_and_the_chart() -> None:
    operator = {"app": "nvidia-dcgm-exporter"}
    chart = {"app.kubernetes.io/name": "dcgm-exporter"}
    pods = [
        _pod("gpu-operator", operator, [{"name": "gpu-metrics", "containerPort": 9400}]),
        _pod("monitoring", chart, [{"name": "metrics", "containerPort": 9401}], ip="10.1.2.4"),
        _pod("gpu-operator", operator, [], ip="fd00::5"),  # no named port: 9400
        _pod("default", operator, [{"name": "gpu-metrics", "containerPort": 9400}], ip="10.9.9.9"),
        _pod("gpu-operator", operator, [{"name": "gpu-metrics", "containerPort": 9400}], ip=None),
        _pod("gpu-operator", operator, [], ip="10.7.7.7", phase="Pending"),
        _pod("gpu-operator", {"app": "other"}, [], ip="10.8.8.8"),
    ]
    assert exporter_urls(pods, DEFAULT_EXPORTER_SELECTORS) == [
        "http://10.1.2.3:9400/metrics",
        "http://10.1.2.4:9401/metrics",
        "http://[fd00::5]:9400/metrics",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["gpu-operator", "chart"])
def test_the_service_scrapes_exporter_pods_found_by_labels(layout: str, tmp_path: Path) -> None:
    sc = small_scenario().model_copy(update={"start": float(int(time.time()))})
    handle = start_simulation(sc, exporter_pods=layout, kubeconfig_out=tmp_path / "kubeconfig")
    try:
        pods = handle.exporter_pods
        assert pods is not None
        expected = sorted(f"http://127.0.0.1:{pods.port_of(n)}/metrics" for n in pods.listeners)
        with KubeCollector(KubeSettings(kubeconfig=str(handle.kubeconfig))) as kube:
            assert kube.wait_synced(10)
            assert kube.exporter_urls(DEFAULT_EXPORTER_SELECTORS) == expected

        config = {
            "cluster": sc.cluster,
            "store_url": f"sqlite:///{tmp_path / 'j.db'}",
            "service": {"http": {"port": 0}, "source": {"kubernetes": {}}},
        }
        cfg = GpufleetConfig.model_validate(config)
        settings = source_settings(cfg.service.source, cfg.cluster)
        assert settings is not None
        parts, _ = build(
            cfg, load_policy(None), "discovery-test",
            store=Store.open(cfg.store_url, cluster=cfg.cluster),
            kubeconfig=str(handle.kubeconfig), scrape=settings, clock=time.time, interval=5.0,
        )  # fmt: skip
        try:
            report = parts.live.run_once(time.time())
            assert report.ok, report.errors
            assert report.gpus == len(handle.layout.gpu_uuid) and report.nodes == len(expected)
        finally:
            parts.loop.close(5.0)
            for close in reversed(parts.closers):
                close()
            parts.telemetry.close()
    finally:
        handle.stop()
