"""What `make demo` runs (`gpufleet run --embedded`): the dashboard's URL comes first, then the
banner; the service finds the demo's first fault and acts on it; the dashboard answers and shows
the demo's journal; Ctrl-C (SIGTERM here) stops everything, the dashboard included."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
GPUFLEET = Path(sys.executable).parent / "gpufleet"


def _reader(out: object, seen: list[str]) -> threading.Thread:
    def read() -> None:
        for line in out:  # type: ignore[attr-defined]
            seen.append(line)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


def _wait_for(seen: list[str], needle: str, proc: subprocess.Popen[str], timeout: float) -> str:
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            if needle in "".join(seen) or proc.poll() is not None:
                done.set()
            done.wait(0.2)

    threading.Thread(target=poll, daemon=True).start()
    done.wait(timeout)
    text = "".join(seen)
    assert needle in text, text
    return text


def test_make_demo_brings_up_the_fleet_the_service_and_the_dashboard(tmp_path: Path) -> None:
    wd = tmp_path / "wd"
    cmd = [str(GPUFLEET), "run", "--embedded", "--speed", "40", "--metrics-port", "0",
           "--k8s-port", "0", "--dashboard-port", "0", "--workdir", str(wd),
           "--kubeconfig-out", str(tmp_path / "kc")]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path, env=env
    )
    seen: list[str] = []
    try:
        _reader(proc.stdout, seen)
        text = _wait_for(seen, "finding  CRITICAL gpu_xid h100-0005", proc, 120)
        first = next(line for line in text.splitlines() if line.strip())
        url = re.search(r"Dashboard: (http://\S+)", first)
        assert url, f"the dashboard URL is not the first line: {first!r}"
        assert "LIVE: the demo opts in with `actuation: live`" in text
        assert "schedule      demo-maintenance: maintenance_window" in text
        with urllib.request.urlopen(f"{url.group(1)}/_stcore/health", timeout=30) as r:
            assert r.status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        with pytest.raises(OSError):  # the dashboard stopped with it
            urllib.request.urlopen(f"{url.group(1)}/_stcore/health", timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
