"""Serve mode: exporters follow the simulated Kubernetes API, and the CLI entry points serve."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from harness.k8s_sim import KUBE_FLEET
from simulator.clock import ManualWall
from simulator.scenario import scenario_from_dict
from simulator.serve import SimulationHandle, start_simulation

GPUFLEET = Path(sys.executable).parent / "gpufleet"


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture
def handle(tmp_path: Path) -> Iterator[tuple[SimulationHandle, ManualWall]]:
    down = {"kind": "exporter_down", "node": "h100-0003", "start": "10m", "end": "20m"}
    data = {**KUBE_FLEET, "confounders": [down]}
    wall = ManualWall(time.time())
    h = start_simulation(
        scenario_from_dict(data, "serve-test"),
        kubeconfig_out=tmp_path / "kc",
        wall=wall,
        tick_interval=0.1,
    )
    try:
        yield h, wall
    finally:
        h.stop()


def pods_on_page(text: str) -> set[str]:
    return set(re.findall(r'DCGM_FI_DEV_GPU_UTIL\{[^}]*pod="([^"]+)"', text))


def test_pages_follow_evictions_and_cordons(handle: tuple[SimulationHandle, ManualWall]) -> None:
    h, wall = handle
    assert get(f"{h.metrics_url}/healthz") == (200, "ok\n")
    status, page = get(h.node_metrics_url("h100-0002"))
    assert status == 200 and pods_on_page(page) == {"big-worker-0"}
    assert pods_on_page(get(h.node_metrics_url("h100-0003"))[1]) == set()
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(h.kubeconfig), client_configuration=cfg)
    with client.ApiClient(cfg) as api:
        v1 = client.CoreV1Api(api)
        v1.patch_node("h100-0002", {"spec": {"unschedulable": True}})
        meta = client.V1ObjectMeta(name="big-worker-0", namespace="ml")
        v1.create_namespaced_pod_eviction("big-worker-0", "ml", client.V1Eviction(metadata=meta))
    ksm = get(h.kube_state_metrics_url)[1]
    assert 'kube_node_spec_unschedulable{node="h100-0002"} 1' in ksm
    assert pods_on_page(get(h.node_metrics_url("h100-0002"))[1]) == set()
    wall.advance(31)  # the replacement on h100-0003 starts
    h.cluster.tick()
    assert pods_on_page(get(h.node_metrics_url("h100-0003"))[1]) == {"big-worker-0"}
    uid = h.cluster.get("pods", "ml", "big-worker-0")["metadata"]["uid"]
    assert f'uid="{uid}"' in get(h.kube_state_metrics_url)[1]
    assert 'training_steps_total{namespace="ml",pod="train-worker-0"}' in get(h.jobs_metrics_url)[1]


def test_exporter_down_answers_503_and_targets(handle: tuple[SimulationHandle, ManualWall]) -> None:
    h, wall = handle
    wall.advance(12 * 60)
    assert get(h.node_metrics_url("h100-0003"))[0] == 503
    assert get(h.node_metrics_url("h100-0000"))[0] == 200
    assert get(f"{h.metrics_url}/nodes/nope/metrics")[0] == 404
    urls = json.loads(get(f"{h.metrics_url}/targets")[1])
    assert urls == h.targets() and len(urls) == 4 + 2
    groups = json.loads(get(f"{h.metrics_url}/targets?format=file_sd")[1])
    paths = [g["labels"]["__metrics_path__"] for g in groups]
    assert "/nodes/h100-0001/metrics" in paths and "/kube-state-metrics/metrics" in paths
    assert all(g["targets"] == [f"127.0.0.1:{h.metrics_port}"] for g in groups)


def _token(kubeconfig: Path) -> str:
    return str(json.loads(kubeconfig.read_text())["users"][0]["user"]["token"])


def _serve_cli(args: list[str], tmp_path: Path, kubeconfig: Path) -> None:
    proc = subprocess.Popen(
        [str(GPUFLEET), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        lines: list[str] = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("health"):
                break
        text = "".join(lines)
        k8s = re.search(r"kubernetes\s+(http://127\.0\.0\.1:\d+)", text)
        health = re.search(r"health\s+(http://\S+)", text)
        assert k8s and health, text
        assert get(health.group(1)) == (200, "ok\n")
        # a real API server answers only a caller with credentials: the kubeconfig's token
        req = urllib.request.Request(
            f"{k8s.group(1)}/api/v1/nodes",
            headers={"Authorization": f"Bearer {_token(kubeconfig)}"},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            assert json.loads(r.read())["kind"] == "NodeList"
        assert get(f"{k8s.group(1)}/api/v1/nodes")[0] == 403  # anonymous
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_simulate_serve_cli(tmp_path: Path) -> None:
    kc = tmp_path / "kc.yaml"
    args = ["simulate", "--serve", "--metrics-port", "0", "--k8s-port", "0"]
    _serve_cli([*args, "--kubeconfig-out", str(kc)], tmp_path, kc)
    assert "https://127.0.0.1:" in kc.read_text()


def test_demo_cli_writes_kubeconfig(tmp_path: Path) -> None:
    kc = tmp_path / ".gpufleet" / "demo-kubeconfig"
    _serve_cli(["demo", "--metrics-port", "0", "--k8s-port", "0"], tmp_path, kc)
    assert (tmp_path / ".gpufleet" / "demo-kubeconfig").exists()
