"""A real Prometheus over backfilled simulator output, for tests of anything that speaks PromQL.

`start_prometheus(openmetrics_path, tmp_path)` backfills the file with
`promtool tsdb create-blocks-from openmetrics`, starts the Debian `prometheus` binary on a free
127.0.0.1 port with an empty scrape config, waits until it is ready and returns a handle (call
`stop()`, or use the `prometheus_factory` fixture, which stops every server at test end).
Scenarios are dated 2026-01-01, so retention is set far beyond the default 15 days, which would
otherwise delete the backfilled blocks on start.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from observer.simulator.engine import FleetSimulator
from observer.simulator.openmetrics import OpenMetricsWriter
from observer.simulator.scenario import Scenario

READY_TIMEOUT = 60.0
RETENTION = "100y"
CONFIG = "global:\n  scrape_interval: 1h\n  evaluation_interval: 1h\nscrape_configs: []\n"


def binaries() -> tuple[str, str] | None:
    """Paths of (promtool, prometheus), or None when either is missing."""
    promtool, prometheus = shutil.which("promtool"), shutil.which("prometheus")
    return (promtool, prometheus) if promtool and prometheus else None


def require_binaries() -> tuple[str, str]:
    found = binaries()
    if found is None:
        pytest.skip(
            "promtool/prometheus not on PATH: `make test` installs the Debian package prometheus"
        )
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
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)


def backfill(openmetrics_path: Path, data_dir: Path) -> None:
    promtool, _ = require_binaries()
    data_dir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            promtool,
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            str(openmetrics_path),
            str(data_dir),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"promtool backfill failed:\n{done.stdout}\n{done.stderr}")


def _wait_ready(handle: PrometheusHandle) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if handle.process.poll() is not None:
            raise RuntimeError(f"prometheus exited:\n{handle.log_path.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"{handle.url}/-/ready", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    handle.stop()
    raise RuntimeError(f"prometheus not ready in {READY_TIMEOUT} s:\n{handle.log_path.read_text()}")


def start_prometheus(
    openmetrics_path: Path | None,
    tmp_path: Path,
    lookback_delta: str | None = None,
) -> PrometheusHandle:
    """Backfill `openmetrics_path` (if given) into tmp_path/prom-data and start Prometheus."""
    _, prometheus = require_binaries()
    base = tmp_path / f"prom-{free_port()}"
    data_dir = base / "data"
    data_dir.mkdir(parents=True)
    if openmetrics_path is not None:
        backfill(Path(openmetrics_path), data_dir)
    config = base / "prometheus.yml"
    config.write_text(CONFIG)
    log_path = base / "prometheus.log"
    for _attempt in range(3):
        port = free_port()
        cmd = [
            prometheus,
            f"--config.file={config}",
            f"--storage.tsdb.path={data_dir}",
            f"--storage.tsdb.retention.time={RETENTION}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ]
        if lookback_delta:
            cmd.append(f"--query.lookback-delta={lookback_delta}")
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        handle = PrometheusHandle(f"http://127.0.0.1:{port}", proc, data_dir, log_path)
        try:
            _wait_ready(handle)
            return handle
        except RuntimeError:
            handle.stop()
            if "address already in use" not in log_path.read_text():
                raise
    raise RuntimeError("prometheus could not bind a free port")


def write_scenario(
    scenario: Scenario, path: Path, start: float | None = None, end: float | None = None
) -> Path:
    """The scenario as OpenMetrics at `path` (whole scenario by default)."""
    OpenMetricsWriter(FleetSimulator(scenario)).write(path, start, end)
    return path


PrometheusFactory = Callable[..., PrometheusHandle]


@pytest.fixture
def prometheus_factory(tmp_path: Path) -> Iterator[PrometheusFactory]:
    """`factory(scenario_or_openmetrics_path, lookback_delta=None) -> PrometheusHandle`.

    Every server started through the factory is stopped when the test ends.
    """
    require_binaries()
    started: list[PrometheusHandle] = []

    def factory(
        source: Scenario | Path | str, lookback_delta: str | None = None
    ) -> PrometheusHandle:
        if isinstance(source, Scenario):
            path = write_scenario(source, tmp_path / f"{source.name}-{len(started)}.om")
        else:
            path = Path(source)
        handle = start_prometheus(path, tmp_path, lookback_delta)
        started.append(handle)
        return handle

    yield factory
    for h in started:
        h.stop()
