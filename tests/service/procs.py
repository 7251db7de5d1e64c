"""`gpufleet run` processes against a simulation served by the test: start, read their URL,
ask /readyz and /metrics, stop them (by the pid the test started, never by name)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from harness.live_policy import QUARANTINE_CRITICAL, live_policy_dict
from remediations.store import Store
from simulator.serve import SimulationHandle

ROOT = Path(__file__).resolve().parents[2]


def service_policy_file(tmp: Path) -> Path:
    """The one policy of the process tests (writes to Kubernetes; budgets for a 4-node fleet)."""
    p = tmp / "policy.yaml"
    p.write_text(yaml.safe_dump(live_policy_dict([QUARANTINE_CRITICAL])))
    return p


def write_config(tmp: Path, handle: SimulationHandle, **service: Any) -> Path:
    assert handle.kubeconfig is not None
    cfg = {
        "cluster": handle.scenario.cluster,
        "store_url": f"sqlite:///{tmp / 'journal.db'}",
        "kubeconfig": str(handle.kubeconfig),
        "policy": str(service_policy_file(tmp)),
        "service": {
            "interval": handle.scenario.scrape_interval / handle.clock.speed,
            "source": {"discovery_url": f"{handle.metrics_url}/targets"},
            "http": {"host": "127.0.0.1", "port": 0},
            **service,
        },
    }
    f = tmp / "gpufleet.yaml"
    f.write_text(yaml.safe_dump(cfg))
    # Migrate once up front: two processes creating one SQLite schema at the same instant race
    # (PostgreSQL serialises them with an advisory lock; SQLite has none).
    Store.open(str(cfg["store_url"]), cluster=str(cfg["cluster"])).close()
    return f


class Proc:
    def __init__(self, config: Path, identity: str, log: Path) -> None:
        self.identity = identity
        self.log = log
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.out = log.open("w")
        self.p = subprocess.Popen(
            [sys.executable, "-m", "gpufleet.cli", "run", "--config", str(config),
             "--identity", identity],
            stdout=self.out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=env,
        )  # fmt: skip
        self.url = ""

    def wait_url(self, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(r"serving (http://\S+)", self.log.read_text())
            if m:
                self.url = m.group(1)
                return self.url
            if self.p.poll() is not None:
                raise AssertionError(f"{self.identity} exited: {self.log.read_text()[-3000:]}")
            time.sleep(0.1)
        raise AssertionError(f"{self.identity} never served: {self.log.read_text()[-3000:]}")

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as r:
                return int(r.status), bytes(r.read())
        except urllib.error.HTTPError as e:
            return int(e.code), bytes(e.read())

    def ready(self) -> dict[str, Any]:
        return dict(json.loads(self.get("/readyz")[1]))

    def metric(self, name: str) -> float:
        """Sum of every sample of `name` (0 when absent)."""
        text = self.get("/metrics")[1].decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and (line[len(name)] in " {"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(timeout=10)
        self.out.close()


def wait_for(cond: Any, timeout: float, what: str, step: float = 0.2) -> float:
    """Poll `cond()` until true; returns the seconds it took."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cond():
            return time.monotonic() - t0
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
