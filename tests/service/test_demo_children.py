"""`gpufleet demo` killed with SIGKILL takes its children with it: the Streamlit dashboard (and,
where installed, the demo's Prometheus) is gone within seconds and its port is free, so the next
`make demo` starts clean (gpufleet.children: PR_SET_PDEATHSIG)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.orphans import (
    HAS_PROC,
    children,
    kill_9_and_check_children_gone,
    kill_survivors,
    wait_healthy,
)
from tests.service.demo_proc import Demo

pytestmark = pytest.mark.slow


@pytest.mark.skipif(not HAS_PROC, reason="needs Linux /proc")
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
        ports = [int(url.rsplit(":", 1)[1])]
        if shutil.which("prometheus"):
            assert any("prometheus --config.file" in cmd for cmd in kids.values()), kids
            m = demo.find(r"prometheus    http://127\.0\.0\.1:(\d+)", 1)
            ports.append(int(m.group(1)))

        kill_9_and_check_children_gone(demo.proc, kids, ports)
    finally:
        demo.kill()
        kill_survivors(kids)  # only the children this test's demo started
