"""What `make demo` runs (`gpufleet run --embedded`, at 1x): the dashboard's URL comes first, then
the banner; the service finds the demo's first fault and acts on it; the approve command it
prints works as printed, and the approved drain evicts the notebook's real pods; every journal
row is stamped on the wall clock (one clock for the dashboard, the CLI and Kubernetes); Ctrl-C
(SIGTERM here) stops everything, the dashboard included."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from remediations.store import Store
from tests.service.demo_proc import GPUFLEET, reader, wait_for

pytestmark = pytest.mark.slow


def test_make_demo_brings_up_the_fleet_the_service_and_the_dashboard(tmp_path: Path) -> None:
    wd = tmp_path / "wd"
    # The default speed (1x, the wall clock) and, where installed, the demo's own Prometheus;
    # the first fault 40 s in instead of 2 min (Prometheus first scrapes every target).
    cmd = [str(GPUFLEET), "run", "--embedded", "--warmup", "40", "--metrics-port", "0",
           "--k8s-port", "0", "--dashboard-port", "0", "--workdir", str(wd),
           "--kubeconfig-out", str(tmp_path / "kc")]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    started = time.time()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path, env=env
    )
    seen: list[str] = []
    try:
        reader(proc.stdout, seen)
        text = wait_for(seen, "finding  CRITICAL gpu_xid a100-0002", proc, 150)
        first = next(line for line in text.splitlines() if line.strip())
        url = re.search(r"Dashboard: (http://\S+)", first)
        assert url, f"the dashboard URL is not the first line: {first!r}"
        assert "LIVE: the demo opts in with `actuation: live`" in text
        assert "schedule      demo-maintenance: maintenance_window" in text
        prom = re.search(r"prometheus    (http://\S+) \(scrapes the simulator", text)
        if shutil.which("prometheus"):  # what-if, history and the service read it
            assert prom, text
            with urllib.request.urlopen(f"{prom.group(1)}/api/v1/query?query=count(up)") as r:
                assert json.loads(r.read())["data"]["result"][0]["value"][1] == "14"
            # every target scraped before the first cycle: the fault is seen arriving, not
            # "present before gpufleet started", so the quarantine runs without a person
            assert "present before gpufleet started" not in text
        else:
            assert "prometheus    not installed: What-if, incident history" in text
        wait_for(seen, "did cordon a100-0002", proc, 60)
        with urllib.request.urlopen(f"{url.group(1)}/_stcore/health", timeout=30) as r:
            assert r.status == 200

        text = wait_for(seen, "drain node/a100-0002: awaiting approval", proc, 60)
        approve = re.search(r"approve: (.+ actions approve \w+ --config \S+)", text)
        assert approve, text
        done = subprocess.run(  # exactly as printed, from the directory the demo runs in
            shlex.split(approve.group(1)), cwd=tmp_path, capture_output=True, text=True, env=env
        )
        assert done.returncode == 0, done.stderr
        wait_for(seen, "evicted 2 pod(s) from a100-0002", proc, 90)

        store = Store.open(f"sqlite:///{wd / 'demo.db'}", cluster="demo")
        try:
            rows = store.audit_log()
            ats = [a.at for a in rows]
        finally:
            store.close()
        assert rows and any(a.actor != "gpufleet" for a in rows)  # the approval is one of them
        assert started - 1 <= min(ats) and max(ats) <= time.time() + 1, (started, ats)
        assert ats == sorted(ats)  # the journal's order is the clock's

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        with pytest.raises(OSError):  # the dashboard stopped with it
            urllib.request.urlopen(f"{url.group(1)}/_stcore/health", timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
