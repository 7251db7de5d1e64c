"""A real Prometheus scrapes serve mode through file_sd and sees a cordon made via the API."""

from __future__ import annotations

import copy
import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.k8s_sim import small_scenario
from simulator.serve import SimulationHandle, start_simulation

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="no prometheus binary"),
]
CONFIG = """global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: sim
    file_sd_configs:
      - files: [{targets}]
        refresh_interval: 1s
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[SimulationHandle, Callable[[str], list[Any]]]]:
    handle = start_simulation(small_scenario(), speed=60.0)
    with urllib.request.urlopen(f"{handle.metrics_url}/targets?format=file_sd") as r:
        (tmp_path / "targets.json").write_bytes(r.read())
    (tmp_path / "prometheus.yml").write_text(CONFIG.format(targets=tmp_path / "targets.json"))
    port = _free_port()
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def query(promql: str) -> list[Any]:
        q = urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?{q}", timeout=5) as r:
            return list(json.load(r)["data"]["result"])

    try:
        yield handle, query
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        handle.stop()


def _eventually(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass  # Prometheus still starting
        time.sleep(0.5)
    raise AssertionError("condition not met in time")


def test_prometheus_scrapes_live_endpoints(live: tuple[SimulationHandle, Any]) -> None:
    handle, query = live
    _eventually(lambda: len(query("up == 1")) == 4 + 2)
    _eventually(lambda: len(query("DCGM_FI_DEV_GPU_UTIL")) == 32)
    pods = {r["metric"].get("pod") for r in query('DCGM_FI_DEV_GPU_UTIL{Hostname="h100-0002"}')}
    assert pods == {"big-worker-0"}
    node = copy.deepcopy(handle.cluster.get("nodes", "", "h100-0003"))
    node["spec"]["unschedulable"] = True
    handle.cluster.write("nodes", node)
    _eventually(lambda: bool(query('kube_node_spec_unschedulable{node="h100-0003"} == 1')))
