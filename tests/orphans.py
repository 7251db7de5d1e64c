"""Does a gpufleet command's child outlive it? What the kill -9 tests share: the command's children
read from /proc, a SIGKILL of the command alone (no handler, no finally: only the kernel acts),
and the children and their ports checked gone; the cleanup kills only the children it recorded."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterable
from pathlib import Path

HAS_PROC = Path("/proc/self/task").exists()
"""The tests read children from /proc (Linux); elsewhere they skip."""


def children(pid: int) -> dict[int, str]:
    """The process's children (every thread's), pid -> command line."""
    out: dict[int, str] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            with contextlib.suppress(OSError):
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
                out[int(child)] = cmdline.replace(b"\0", b" ").decode()
    return out


def running(pid: int, cmdline: str) -> bool:
    """Still that process, and not a zombie (a zombie holds no port)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        now = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return now == cmdline and stat.rsplit(")", 1)[1].split()[0] != "Z"


def free_for_a_server(port: int) -> bool:
    """Nothing listens on the port and a server can bind it (with SO_REUSEADDR, as Streamlit
    and Prometheus do: the killed process's closed connections may linger in TIME_WAIT)."""
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", port)) == 0:
            return False
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def wait_healthy(url: str, timeout: float) -> None:
    """Wait until the Streamlit at `url` answers its health check."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        assert time.monotonic() < deadline, f"the dashboard at {url} never answered"
        time.sleep(0.25)


def kill_9_and_check_children_gone(
    proc: subprocess.Popen[str], kids: dict[int, str], ports: Iterable[int]
) -> None:
    """SIGKILL `proc` and assert that its recorded children die within 5 s and free `ports`."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    deadline = time.monotonic() + 5
    while any(running(p, c) for p, c in kids.items()) and time.monotonic() < deadline:
        time.sleep(0.1)
    survivors = [c for p, c in kids.items() if running(p, c)]
    assert not survivors, f"outlived the kill: {survivors}"
    for port in ports:  # closed at exit, but a busy machine may take a moment to reap
        while not free_for_a_server(port) and time.monotonic() < deadline + 5:
            time.sleep(0.1)
        assert free_for_a_server(port), f"port {port} still taken"


def kill_survivors(kids: dict[int, str]) -> None:
    """Cleanup: SIGKILL those recorded children still running (only those: never by name)."""
    for pid, cmd in kids.items():
        if running(pid, cmd):
            os.kill(pid, signal.SIGKILL)
