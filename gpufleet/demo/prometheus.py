"""A real Prometheus for the demo: when Debian's `prometheus` is installed, `make demo` starts it
scraping the simulator (every dcgm-exporter page, kube-state-metrics and the training steps,
through the simulator's file_sd targets, every 15 s as a ServiceMonitor would), and the service,
What-if, incident history and the Jobs heatmap read it, as on a cluster with
kube-prometheus-stack. Without it the demo scrapes the exporters directly and says what is
missing. Its data lives under the demo's workdir and starts empty each time.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
from pathlib import Path

from gpufleet.children import die_with_this_process
from lab import local_prometheus as lp
from simulator.serve import SimulationHandle

SCRAPE_INTERVAL = 15.0
CONFIG = """global:
  scrape_interval: {interval:g}s
  scrape_timeout: 10s
scrape_configs:
  - job_name: dcgm-exporter
    honor_labels: true
    file_sd_configs:
      - files: [{targets}]
        refresh_interval: 30s
"""
MISSING = (
    "not installed: What-if, incident history and the Jobs heatmap need it "
    "(`sudo apt-get install prometheus`); the service scrapes the exporters directly"
)


def start(handle: SimulationHandle, workdir: Path) -> lp.PrometheusHandle | None:
    """Prometheus scraping the simulation (None when the binaries are not installed)."""
    if lp.binaries() is None:
        return None
    home = workdir / "prometheus"
    shutil.rmtree(home, ignore_errors=True)  # the demo's journal is fresh; so is its history
    home.mkdir(parents=True)
    targets = home / "targets.json"
    with urllib.request.urlopen(f"{handle.metrics_url}/targets?format=file_sd", timeout=10) as r:
        targets.write_bytes(r.read())
    config = CONFIG.format(interval=SCRAPE_INTERVAL, targets=targets)
    prom = lp.start_prometheus(None, home, config=config, child_setup=die_with_this_process())
    expected = sum(len(group.get("targets", [])) for group in json.loads(targets.read_text()))
    wait_scraped(prom, expected)
    return prom


def wait_scraped(
    prom: lp.PrometheusHandle, targets: int, timeout: float = 3 * SCRAPE_INTERVAL
) -> bool:
    """Until every target has been scraped once, so the service's first cycle sees the whole
    fleet (a GPU first seen with a fault already on it is treated as pre-existing, and its
    quarantine then waits for a person). False after `timeout`: the demo goes on regardless."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            up = prom.query("count(up)", time.time())
        except (OSError, RuntimeError, ValueError):
            up = []
        if up and float(up[0]["value"][1]) >= targets:
            return True
        time.sleep(1.0)
    return False
