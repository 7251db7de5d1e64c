"""A real Prometheus scraping a running simulation (every exporter page, kube-state-metrics and
the training-step page through the simulator's file_sd targets), as in a cluster where
kube-prometheus-stack scrapes the GPU Operator's dcgm-exporter."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

from lab import local_prometheus as lp
from simulator.serve import SimulationHandle
from tests.prometheus_fixture import PrometheusHandle, require_binaries

SCRAPE_CONFIG = """global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: sim
    honor_labels: true
    file_sd_configs:
      - files: [{targets}]
        refresh_interval: 1s
"""


def scraping_prometheus(handle: SimulationHandle, workdir: Path) -> PrometheusHandle:
    """Start Prometheus scraping `handle` every second (stop it when done)."""
    require_binaries()
    targets = workdir / "targets.json"
    with urllib.request.urlopen(f"{handle.metrics_url}/targets?format=file_sd") as r:
        targets.write_bytes(r.read())
    return lp.start_prometheus(None, workdir, config=SCRAPE_CONFIG.format(targets=targets))


def wait_for_every_target(prom: PrometheusHandle, workdir: Path, timeout: float = 60.0) -> None:
    """Until every exporter `scraping_prometheus` was given has been scraped once: one scraped
    target is not the fleet (a check that reads fields or pod labels could see only a node
    whose exporter lacks them, as on a loaded machine)."""
    groups = json.loads((workdir / "targets.json").read_text())
    n = sum(len(g["targets"]) for g in groups)
    wait_for_series(prom, f"count(up == 1) >= {n}", timeout)


def wait_for_series(prom: PrometheusHandle, promql: str, timeout: float = 60.0) -> None:
    """Until `promql` returns something at the server's now."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if prom.query(promql, time.time()):
            return
        time.sleep(0.5)
    raise AssertionError(f"Prometheus never answered {promql} ({json.dumps(str(prom.url))})")
