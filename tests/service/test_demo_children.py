"""`gpufleet demo` killed with SIGKILL takes its children with it: the Streamlit dashboard (and,
where installed, the demo's Prometheus) is gone within seconds and its port is free, so the next
`make demo` starts clean (gpufleet.demo.children: PR_SET_PDEATHSIG)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import time
import urllib.request
from pathlib import Path

import pytest

from tests.service.demo_proc import Demo

pytestmark = pytest.mark.slow


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


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_the_dashboard_and_prometheus_die_with_a_killed_demo(tmp_path: Path) -> None:
    demo = Demo(tmp_path, "--warmup", "40")  # 1x: the demo's own Prometheus where installed
    kids: dict[int, str] = {}
    try:
        demo.wait_for("service       http", 120)  # dashboard started, Prometheus scraped
        url = demo.find(r"Dashboard: (http://\S+)", 1).group(1)
        wait_healthy(url, 60)
        kids = children(demo.proc.pid)
        streamlit = [p for p, cmd in kids.items() if "streamlit run" in cmd]
        assert streamlit, kids
        prom_port = None
        if shutil.which("prometheus"):
            assert any("prometheus --config.file" in cmd for cmd in kids.values()), kids
            m = demo.find(r"prometheus    http://127\.0\.0\.1:(\d+)", 1)
            prom_port = int(m.group(1))

        os.kill(demo.proc.pid, signal.SIGKILL)  # no handler, no finally: only the kernel acts
        demo.proc.wait(10)
        deadline = time.monotonic() + 5
        while any(running(p, c) for p, c in kids.items()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [c for p, c in kids.items() if running(p, c)]
        port = int(url.rsplit(":", 1)[1])
        assert free_for_a_server(port), f"port {port} still taken"
        assert prom_port is None or free_for_a_server(prom_port), f"port {prom_port} still taken"
    finally:
        demo.kill()
        for pid, cmd in kids.items():  # only the children this test's demo started
            if running(pid, cmd):
                os.kill(pid, signal.SIGKILL)
