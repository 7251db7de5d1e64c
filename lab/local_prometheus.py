"""A throwaway local Prometheus over backfilled data, for `gpufleet eval`, tests and benches.

`start_prometheus(openmetrics_path, workdir)` backfills the file with
`promtool tsdb create-blocks-from openmetrics`, starts the Debian `prometheus` binary on a free
127.0.0.1 port with an empty scrape config, waits until it is ready and returns a handle; call
`stop()` (or use the handle as a context manager). Scenarios are dated 2026-01-01, so retention
is set far beyond the default 15 days, which would otherwise delete the backfilled blocks on
start. The binaries come from the Debian package `prometheus`; when they are missing,
`PrometheusMissing` says how to install them.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from simulator.engine import FleetSimulator
from simulator.openmetrics import OpenMetricsWriter
from simulator.scenario import Scenario

READY_TIMEOUT = 60.0
RETENTION = "100y"
CONFIG = "global:\n  scrape_interval: 1h\n  evaluation_interval: 1h\nscrape_configs: []\n"
INSTALL_HINT = "install the Debian package prometheus, or run `make test` which installs it"


class LocalPrometheusError(RuntimeError):
    """The local Prometheus could not be backfilled or started (the message says why)."""


class PrometheusMissing(LocalPrometheusError):
    """`promtool` or `prometheus` is not on PATH."""


def binaries() -> tuple[str, str] | None:
    """Paths of (promtool, prometheus), or None when either is missing."""
    promtool, prometheus = shutil.which("promtool"), shutil.which("prometheus")
    return (promtool, prometheus) if promtool and prometheus else None


def require_binaries() -> tuple[str, str]:
    found = binaries()
    if found is None:
        missing = [b for b in ("promtool", "prometheus") if shutil.which(b) is None]
        raise PrometheusMissing(f"{' and '.join(missing)} not found on PATH: {INSTALL_HINT}")
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PrometheusHandle:
    url: str
    """Base URL, e.g. http://127.0.0.1:40123 (no trailing slash)."""
    process: subprocess.Popen[bytes]
    data_dir: Path
    log_path: Path
    _stopped: bool = field(default=False, repr=False)

    def api(self, path: str, **params: str | float) -> Any:
        """GET /api/v1/<path> and return `data` (raises on a non-success answer)."""
        query = urllib.parse.urlencode({k: str(v) for k, v in params.items()})
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=30) as resp:
            body = json.loads(resp.read())
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus answered {body}")
        return body["data"]

    def query(self, promql: str, at: float) -> list[dict[str, Any]]:
        """Instant query at unix time `at`; the vector's [{metric, value}] entries."""
        data = self.api("query", query=promql, time=at)
        result: list[dict[str, Any]] = data["result"]
        return result

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def backfill(openmetrics_path: Path, data_dir: Path) -> None:
    promtool, _ = require_binaries()
    data_dir.mkdir(parents=True, exist_ok=True)
    cmd = [promtool, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics_path),
           str(data_dir)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise LocalPrometheusError(f"promtool backfill failed:\n{done.stdout}\n{done.stderr}")


def _wait_ready(handle: PrometheusHandle) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if handle.process.poll() is not None:
            raise LocalPrometheusError(f"prometheus exited:\n{handle.log_path.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"{handle.url}/-/ready", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    handle.stop()
    raise LocalPrometheusError(
        f"prometheus not ready in {READY_TIMEOUT:g} s:\n{handle.log_path.read_text()[-4000:]}"
    )


def start_prometheus(
    openmetrics_path: Path | None,
    workdir: Path,
    lookback_delta: str | None = None,
    data_dir: Path | None = None,
    config: str = CONFIG,
    child_setup: Callable[[], None] | None = None,
) -> PrometheusHandle:
    """Backfill `openmetrics_path` (if given) into a fresh directory under `workdir` (or into
    `data_dir`, e.g. one backfilled part by part with `backfill`) and start Prometheus on a
    free loopback port (retried when another process takes the port first). `config`: the
    prometheus.yml text (default: no scrape jobs; tests pass one that scrapes a simulator).
    `child_setup` runs in the child before exec (the demo's ties Prometheus's life to its own)."""
    _, prometheus = require_binaries()
    base = Path(workdir) / f"prom-{free_port()}"
    base.mkdir(parents=True)
    if data_dir is None:
        data_dir = base / "data"
        data_dir.mkdir()
    if openmetrics_path is not None:
        backfill(Path(openmetrics_path), data_dir)
    config_path = base / "prometheus.yml"
    config_path.write_text(config)
    log_path = base / "prometheus.log"
    for _attempt in range(3):
        port = free_port()
        cmd = [
            prometheus,
            f"--config.file={config_path}",
            f"--storage.tsdb.path={data_dir}",
            f"--storage.tsdb.retention.time={RETENTION}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ]
        if lookback_delta:
            cmd.append(f"--query.lookback-delta={lookback_delta}")
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, preexec_fn=child_setup
            )
        handle = PrometheusHandle(f"http://127.0.0.1:{port}", proc, data_dir, log_path)
        try:
            _wait_ready(handle)
            return handle
        except BaseException:
            handle.stop()
            if "address already in use" not in log_path.read_text():
                raise
    raise LocalPrometheusError("prometheus could not bind a free port on 127.0.0.1")


def write_scenario(
    scenario: Scenario, path: Path, start: float | None = None, end: float | None = None
) -> Path:
    """The scenario as OpenMetrics at `path` (whole scenario by default), in the scenario's pod
    label layout and field list (`pod_labels`, `shipped_fields_only`)."""
    OpenMetricsWriter(
        FleetSimulator(scenario),
        pod_labels=scenario.pod_labels,
        shipped_fields_only=scenario.shipped_fields_only,
    ).write(path, start, end)
    return path


__all__ = [
    "INSTALL_HINT",
    "LocalPrometheusError",
    "PrometheusHandle",
    "PrometheusMissing",
    "backfill",
    "binaries",
    "free_port",
    "require_binaries",
    "start_prometheus",
    "write_scenario",
]
