"""Starting the dashboard: Streamlit as a child process bound to the loopback interface.

`start(settings, port)` writes the settings file, starts `streamlit run dashboards/app.py`
on 127.0.0.1 (headless, no usage statistics, no file watcher, a minimal toolbar: no Deploy
button) and returns at once with the URL;
`wait_ready` polls Streamlit's health endpoint; `stop` ends the child (SIGTERM, then SIGKILL
after a grace period). `gpufleet dashboard` and `gpufleet demo` both use it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dashboards.settings import DashboardSettings

APP = Path(__file__).with_name("app.py")
HOST = "127.0.0.1"
HEALTH = "/_stcore/health"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
        return True


@dataclass
class Dashboard:
    """A running dashboard process."""

    url: str
    port: int
    process: subprocess.Popen[bytes]
    settings_file: Path
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """True once Streamlit answers its health check; False if it died or timed out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                return False
            try:
                with urllib.request.urlopen(f"http://{HOST}:{self.port}{HEALTH}", timeout=2) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        return False

    def stop(self, grace: float = 10.0) -> int | None:
        """End the process group (idempotent); its exit code."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(grace)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        return self.process.returncode


def command(settings_file: Path, port: int) -> list[str]:
    return [
        sys.executable, "-m", "streamlit", "run", str(APP),
        "--server.address", HOST,
        "--server.port", str(port),
        "--server.headless", "true",
        "--server.fileWatcherType", "none",
        "--browser.gatherUsageStats", "false",
        "--global.showWarningOnDirectExecution", "false",
        "--client.toolbarMode", "minimal",  # no Deploy button: this is an app, not a sketch
        "--", "--settings", str(settings_file),
    ]  # fmt: skip


def start(
    settings: DashboardSettings,
    port: int | None = None,
    *,
    workdir: Path | None = None,
    quiet: bool = True,
    child_setup: Callable[[], None] | None = None,
) -> Dashboard:
    """Start the dashboard (port None: the config's; 0: any free one); returns at once.

    The settings file goes to `workdir` (a temporary directory when None, removed on stop).
    With `quiet` the child's output goes to `workdir/dashboard.log` (or is dropped).
    `child_setup` runs in the child before exec (the demo's ties Streamlit's life to its own)."""
    p = settings.dashboard.port if port is None else port
    p = free_port() if p == 0 else p
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="gpufleet-dashboard-")
        workdir = Path(tmp.name)
    workdir.mkdir(parents=True, exist_ok=True)
    settings_file = settings.write(workdir / "dashboard-settings.json")
    out = open(workdir / "dashboard.log", "wb") if quiet else None  # noqa: SIM115
    try:
        proc = subprocess.Popen(
            command(settings_file, p),
            stdout=out,
            stderr=subprocess.STDOUT if quiet else None,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches us; we stop it in order
            preexec_fn=child_setup,  # None, or the demo's: die with the demo
        )
    finally:
        if out is not None:
            out.close()
    return Dashboard(f"http://localhost:{p}", p, proc, settings_file, tmp)
