"""A real VictoriaMetrics (Debian `victoria-metrics`, single node) loaded with simulator output.

Large fleets keep metrics in Prometheus-compatible stores; VictoriaMetrics answers the same
PromQL HTTP API (its MetricsQL differs in places: docs/collectors.md). The fixture starts it on
a free 127.0.0.1 port with a throwaway data directory, loads an OpenMetrics file through the
import API (`/api/v1/import/prometheus`: Prometheus text, timestamps in milliseconds, so the
file's seconds are converted), forces a flush so the samples are searchable at once, and stops
the server at test end. A missing binary skips the test.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lab.local_prometheus import free_port

BINARY = "victoria-metrics"
READY_TIMEOUT = 30.0


@dataclass
class VictoriaHandle:
    url: str
    proc: subprocess.Popen[bytes]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def prometheus_text(openmetrics: Path) -> Iterator[bytes]:
    """OpenMetrics (timestamps in seconds, `# EOF`) -> Prometheus text (milliseconds)."""
    with openmetrics.open() as f:
        batch: list[str] = []
        for line in f:
            if line.startswith("#"):
                continue
            head, ts = line.rstrip("\n").rsplit(" ", 1)
            batch.append(f"{head} {round(float(ts) * 1000)}\n")
            if len(batch) >= 50_000:
                yield "".join(batch).encode()
                batch = []
        if batch:
            yield "".join(batch).encode()


def _serve(binary: str, tmp_path: Path) -> VictoriaHandle | None:
    """Start on a free port and wait for /health; None when another process took the port
    between choosing and binding it (parallel test workers), so the caller picks another."""
    port = free_port()
    data = tmp_path / f"vm-{port}"
    log_path = tmp_path / f"vm-{port}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [binary, f"-httpListenAddr=127.0.0.1:{port}", f"-storageDataPath={data}",
             "-retentionPeriod=100y", "-search.latencyOffset=0s", "-search.disableCache",
             "-loggerLevel=ERROR"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    handle = VictoriaHandle(f"http://127.0.0.1:{port}", proc)
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        if proc.poll() is not None:
            if "address already in use" in log_path.read_text():
                return None
            raise RuntimeError(f"victoria-metrics exited; see {log_path}")
        try:
            with urllib.request.urlopen(handle.url + "/health", timeout=2):
                return handle
        except OSError:
            if time.monotonic() > deadline:
                handle.stop()
                raise RuntimeError(f"victoria-metrics did not start; see {log_path}") from None
            time.sleep(0.1)


def start_victoria_metrics(openmetrics: Path, tmp_path: Path) -> VictoriaHandle:
    binary = shutil.which(BINARY)
    if binary is None:
        pytest.skip("victoria-metrics not on PATH: install the Debian package victoria-metrics")
    for _attempt in range(3):
        started = _serve(binary, tmp_path)
        if started is not None:
            handle = started
            break
    else:
        raise RuntimeError("victoria-metrics could not bind a free port on 127.0.0.1")
    for chunk in prometheus_text(openmetrics):
        req = urllib.request.Request(
            handle.url + "/api/v1/import/prometheus", data=chunk, method="POST"
        )
        with urllib.request.urlopen(req, timeout=60):
            pass
    with urllib.request.urlopen(handle.url + "/internal/force_flush", timeout=30):
        pass
    return handle


VictoriaFactory = Callable[[Path], VictoriaHandle]


@pytest.fixture
def victoria_factory(tmp_path: Path) -> Iterator[VictoriaFactory]:
    """`factory(openmetrics_path) -> VictoriaHandle`; every server is stopped at test end."""
    started: list[VictoriaHandle] = []

    def factory(path: Path) -> VictoriaHandle:
        handle = start_victoria_metrics(path, tmp_path)
        started.append(handle)
        return handle

    yield factory
    for h in started:
        h.stop()
