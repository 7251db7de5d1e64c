"""dcgm-exporter's variants through both collectors: `hostname` (new) and `Hostname` (old),
`DCGM_FI_DEV_CLOCKS_EVENT_REASONS` (new name of the throttle field), MIG instances, and a
counter that resets (exporter restart) inside the increase window."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.plan import PromSettings
from observer.scrape.collector import ScrapeCollector, ScrapeSettings
from tests.prometheus_fixture import start_prometheus

T0 = 1_767_225_600.0
STEPS = 9  # 0 .. 240 s at 30 s
REPLAYS = [100, 110, 120, 130, 140, 150, 5, 15, 25]  # restarts between 150 s and 180 s
GPUS = (  # (labels, FB used) - two MIG instances of one GPU on n1 (new `hostname`), one on n2
    ('gpu="0",UUID="GPU-aaaaaaaa-0000-0000-0000-000000000001",GPU_I_ID="1",'
     'GPU_I_PROFILE="3g.40gb",modelName="NVIDIA A100-SXM4-80GB",hostname="n1"', 1000),
    ('gpu="0",UUID="GPU-aaaaaaaa-0000-0000-0000-000000000001",GPU_I_ID="2",'
     'GPU_I_PROFILE="3g.40gb",modelName="NVIDIA A100-SXM4-80GB",hostname="n1"', 2000),
    ('gpu="0",UUID="GPU-bbbbbbbb-0000-0000-0000-000000000002",'
     'modelName="NVIDIA H100 80GB HBM3",Hostname="n2"', 3000),
)  # fmt: skip


def page(k: int, timestamp: float | None = None) -> str:
    """The exporters' lines at step k (one text page for both nodes)."""
    ts = "" if timestamp is None else f" {timestamp:.3f}"
    lines = []
    for labels, fb in GPUS:
        lines.append(f"DCGM_FI_DEV_FB_USED{{{labels}}} {fb}{ts}")
        lines.append(f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{{labels}}} 8{ts}")
        lines.append(f"DCGM_FI_DEV_PCIE_REPLAY_COUNTER{{{labels}}} {REPLAYS[k]}{ts}")
    return "\n".join(lines) + "\n"


def openmetrics() -> str:
    fams: dict[str, list[str]] = {}
    for k in range(STEPS):
        for line in page(k, T0 + 30 * k).splitlines():
            fams.setdefault(line.split("{", 1)[0], []).append(line)
    out = []
    for name, lines in fams.items():
        out += [f"# TYPE {name} gauge", *lines]
    return "\n".join(out) + "\n# EOF\n"


def check(snapshot: Any) -> None:
    g = snapshot.gpus
    assert [n.name for n in snapshot.nodes] == ["n1", "n2"]
    assert g.mig_instance.tolist() == ["1", "2", ""]
    assert g.mig_profile.tolist() == ["3g.40gb", "3g.40gb", ""]
    assert g.node_index.tolist() == [0, 0, 1]
    assert snapshot.metrics["DCGM_FI_DEV_FB_USED"].value.tolist() == [1000.0, 2000.0, 3000.0]
    throttle = snapshot.metrics["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"]  # folded into the old name
    assert throttle.value.tolist() == [8.0, 8.0, 8.0]
    pcie = snapshot.metrics["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"]
    assert pcie.increase is not None
    np.testing.assert_allclose(pcie.increase, [35.0] * 3)  # 140 150 | 5 15 25: reset-aware


@pytest.mark.prometheus
def test_variants_through_prometheus(tmp_path: Path) -> None:
    om = tmp_path / "variants.om"
    om.write_text(openmetrics())
    prom = start_prometheus(om, tmp_path)
    try:
        with PrometheusCollector(PromSettings(prom.url)) as c:
            r = c.collect(T0 + 240)
    finally:
        prom.stop()
    assert r.stats.problems == ()
    check(r.snapshot)


class _Pages(BaseHTTPRequestHandler):
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = page(self.server.step).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def exporter() -> Iterator[Any]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    server.step = 0  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_variants_through_direct_scrape(exporter: Any) -> None:
    url = f"http://127.0.0.1:{exporter.server_address[1]}/metrics"
    with ScrapeCollector(ScrapeSettings(targets=(url,)), now=lambda: T0 + 30 * exporter.step) as c:
        for k in range(STEPS):
            exporter.step = k
            r = c.collect()
    assert r.stats.problems == () and r.malformed == 0
    check(r.snapshot)


UP_BY_POD = (  # Kubernetes pod discovery: `instance` is the exporter pod's IP, no node label
    ('up{job="dcgm-exporter",instance="10.8.0.11:9400",namespace="gpu-operator",'
     'pod="nvidia-dcgm-exporter-x1"}', 1),
    ('up{job="dcgm-exporter",instance="10.8.0.12:9400",namespace="gpu-operator",'
     'pod="nvidia-dcgm-exporter-x2"}', 0),
    ('up{job="dcgm-exporter",instance="10.8.0.13:9400",namespace="gpu-operator",'
     'pod="nvidia-dcgm-exporter-gone"}', 1),  # a pod kube-state-metrics does not list
    ('kube_pod_info{namespace="gpu-operator",pod="nvidia-dcgm-exporter-x1",node="n1"}', 1),
    ('kube_pod_info{namespace="gpu-operator",pod="nvidia-dcgm-exporter-x2",node="n2"}', 1),
)  # fmt: skip


@pytest.mark.prometheus
def test_up_maps_to_nodes_through_the_exporter_pod(tmp_path: Path) -> None:
    """`up` whose `instance` is a pod IP reaches its node through the exporter pod's record."""
    lines = openmetrics().removesuffix("# EOF\n").splitlines()
    for name in ("up", "kube_pod_info"):
        lines.append(f"# TYPE {name} gauge")
        for series, value in UP_BY_POD:
            if series.startswith(name + "{"):
                lines += [f"{series} {value} {T0 + 30 * k:.3f}" for k in range(STEPS)]
    om = tmp_path / "up.om"
    om.write_text("\n".join(lines) + "\n# EOF\n")
    prom = start_prometheus(om, tmp_path)
    try:
        with PrometheusCollector(PromSettings(prom.url)) as c:
            cold = c.collect(T0 + 210).snapshot
            warm = c.collect(T0 + 240).snapshot
    finally:
        prom.stop()
    for snap in (cold, warm):
        t = snap.telemetry
        assert t is not None
        assert [n.name for n in snap.nodes] == ["n1", "n2"]
        assert t.node_up.tolist() == [True, False]
    assert cold.telemetry is not None
    assert cold.telemetry.node_last_sample[0] == pytest.approx(T0 + 210)  # n1 up: its last scrape
