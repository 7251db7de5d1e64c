"""`gpufleet dashboard`: config mistakes exit 2 before anything starts; a real run prints the URL
first, serves on 127.0.0.1 and stops cleanly (with its Streamlit child) on Ctrl-C, and its
Streamlit dies with it even on `kill -9` (gpufleet.children)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from dashboards.settings import load_settings
from gpufleet.cli import main
from gpufleet.commands.dashboard import settings_of
from gpufleet.config import load_config
from observer.snapshot.job_identity import DEFAULT_JOB_LABEL_KEYS
from tests.orphans import (
    HAS_PROC,
    children,
    kill_9_and_check_children_gone,
    kill_survivors,
    wait_healthy,
)


def test_a_bad_dashboard_section_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "gpufleet.yaml"
    cfg.write_text("dashboard:\n  refresh_seconds: 0\n  approver: [a@b.c]\n")
    assert main(["dashboard", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "dashboard.refresh_seconds: expected" in err
    assert "dashboard.approver: unknown field" in err


def test_settings_carry_store_cluster_approvers_and_prices(tmp_path: Path) -> None:
    cfg = tmp_path / "gpufleet.yaml"
    cfg.write_text(
        "cluster: east\nstore_url: sqlite:///j.db\n"
        "dashboard: {approvers: [alice@example.com], port: 9000}\n"
        "metering: {prices: {H100: 2.5}, currency: EUR}\n"
    )
    c, _ = load_config(cfg)
    s = settings_of(c, tmp_path / "p.yaml", unauthenticated_approvals=True)
    assert (s.store_url, s.cluster, s.policy) == ("sqlite:///j.db", "east",
                                                  str((tmp_path / "p.yaml").resolve()))  # fmt: skip
    assert s.dashboard.approvers == ["alice@example.com"] and s.dashboard.port == 9000
    assert s.dashboard.unauthenticated_approvals and not c.dashboard.unauthenticated_approvals
    assert s.metering.price_for("H100") == 2.5 and s.metering.currency == "EUR"


def test_written_settings_carry_the_configured_job_label_keys(tmp_path: Path) -> None:
    """What-if groups pods by the keys the Streamlit app reads from the file `gpufleet
    dashboard` writes; a file written before the keys existed loads with the built-in ones."""
    cfg = tmp_path / "gpufleet.yaml"
    cfg.write_text("service:\n  source:\n    job_label_keys: [team.example.com/run, job-name]\n")
    written = settings_of(load_config(cfg)[0], None).write(tmp_path / "settings.json")
    assert load_settings(written).job_label_keys == ("team.example.com/run", "job-name")
    default = settings_of(load_config(None)[0], None)
    assert default.job_label_keys == DEFAULT_JOB_LABEL_KEYS
    old = json.loads(written.read_text())
    del old["job_label_keys"]
    written.write_text(json.dumps(old))
    assert load_settings(written).job_label_keys == DEFAULT_JOB_LABEL_KEYS


@pytest.mark.slow
def test_dashboard_prints_its_url_first_serves_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    cfg = tmp_path / "gpufleet.yaml"
    cfg.write_text(f"cluster: east\nstore_url: sqlite:///{tmp_path / 'j.db'}\n")
    cmd = [sys.executable, "-m", "gpufleet.cli", "dashboard", "--config", str(cfg), "--port", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().strip()
        assert first.startswith("gpufleet dashboard: http://localhost:")
        port = int(first.rsplit(":", 1)[1])
        for _ in range(240):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1):
                    break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail("gpufleet dashboard exited")
                time.sleep(0.25)
        else:
            pytest.fail("the dashboard never answered")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 0
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.slow
@pytest.mark.skipif(not HAS_PROC, reason="needs Linux /proc")
def test_a_killed_dashboard_takes_its_streamlit_with_it(tmp_path: Path) -> None:
    cfg = tmp_path / "gpufleet.yaml"
    cfg.write_text(f"cluster: east\nstore_url: sqlite:///{tmp_path / 'j.db'}\n")
    cmd = [sys.executable, "-m", "gpufleet.cli", "dashboard", "--config", str(cfg), "--port", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    kids: dict[int, str] = {}
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip().removeprefix("gpufleet dashboard: ")
        port = int(url.rsplit(":", 1)[1])
        wait_healthy(f"http://127.0.0.1:{port}", 60)
        kids = children(proc.pid)
        assert any("streamlit run" in c for c in kids.values()), kids

        kill_9_and_check_children_gone(proc, kids, [port])
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        kill_survivors(kids)
