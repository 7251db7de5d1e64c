"""The embedded demo (`gpufleet run --embedded`, `gpufleet demo`: gpufleet.demo.embedded) end to
end on a simulated fleet, cycle by cycle on a manual clock: fault -> finding -> journal ->
quarantine written through the real Kubernetes client into the simulated cluster; a failed
collection does not stop the next cycle; the command starts, reports and stops on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from detectors.base import Detector, DetectorSpec
from detectors.findings import Finding, FindingKind, Severity
from detectors.suite import DetectorSuite
from errors import TemporaryError
from gpufleet.cli import build_parser
from gpufleet.commands.run import demo_dashboard_settings, run_embedded
from gpufleet.commands.run import run as run_cli
from gpufleet.demo.embedded import Embedded, EmbeddedOptions, assemble
from gpufleet.demo.files import DemoFiles
from gpufleet.demo.log import DemoLog
from gpufleet.live_cycle import CycleReport, LiveCycle
from harness.k8s_sim import small_scenario
from remediations.store import AuditRecord, Store
from remediations.types import QUARANTINE_TAINT, ActionState
from simulator.clock import ManualWall
from simulator.cluster import ClusterOptions
from simulator.serve import SimulationHandle, start_simulation

GPUFLEET = Path(sys.executable).parent / "gpufleet"
FAULT = {"kind": "xid48_dbe", "node": "h100-0002", "gpu": 1, "start": "3m"}


@dataclass
class Demo:
    """The embedded service over a small simulated fleet on a manual wall clock."""

    embedded: Embedded
    handle: SimulationHandle
    wall: ManualWall

    @property
    def files(self) -> DemoFiles:
        return self.embedded.files

    @property
    def cycle(self) -> LiveCycle:
        return self.embedded.service.p.live


def start_demo(tmp_path: Path, lines: list[str], *, shadow: bool = False) -> Demo:
    wall = ManualWall(time.time())
    handle = start_simulation(
        small_scenario(faults=[FAULT]),
        kubeconfig_out=tmp_path / "kc",
        wall=wall,
        options=ClusterOptions(startup_seconds=0),
        tick_interval=0.05,
    )
    opts = EmbeddedOptions(workdir=tmp_path / "wd", prometheus=False, shadow=shadow)
    log = DemoLog(handle.scenario.start, write=lines.append)
    try:
        embedded = assemble(handle, opts, clock=handle.clock, log=log)
    except BaseException:
        handle.stop()
        raise
    embedded.service.lead()
    return Demo(embedded, handle, wall)


def stop_demo(demo: Demo) -> None:
    try:
        assert demo.embedded.close() == 0
    finally:
        demo.handle.stop()


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[tuple[Demo, list[str]]]:
    lines: list[str] = []
    d = start_demo(tmp_path, lines)
    try:
        yield d, lines
    finally:
        stop_demo(d)


def step(d: Demo) -> CycleReport:
    """One service cycle; then wait for the background executor's pass it asked for (its journal
    rows show up in the next cycle's report, as in the live demo)."""
    d.wall.advance(d.handle.scenario.scrape_interval)
    d.handle.cluster.tick()
    report = d.embedded.service.cycle_now()
    assert report is not None
    assert d.embedded.service.settle(30.0)
    return report


def _spec(handle: SimulationHandle, node: str) -> dict[str, Any]:
    spec: dict[str, Any] = handle.cluster.get("nodes", "", node)["spec"]
    return spec


def test_fault_becomes_finding_action_and_quarantine(
    demo: tuple[Demo, list[str]],
) -> None:
    loop, lines = demo
    reports = [step(loop) for _ in range(9)]  # to 4.5 min: the fault starts at 3 min
    assert all(r.ok for r in reports), [r.errors for r in reports]
    assert reports[0].gpus == 32
    started = [f for r in reports for f in r.started]
    xid = [f for f in started if f.kind is FindingKind.GPU_XID]
    assert len(xid) == 1 and xid[0].node == "h100-0002"
    store = Store.open(loop.files.store_url, cluster="small")
    try:
        by_playbook = {a.playbook: a for a in store.actions()}
        assert by_playbook["quarantine"].state is ActionState.DONE
        assert by_playbook["drain"].state is ActionState.AWAITING_APPROVAL
    finally:
        store.close()
    spec = _spec(loop.handle, "h100-0002")
    assert spec.get("unschedulable") is True
    assert QUARANTINE_TAINT in {t["key"] for t in spec.get("taints", [])}
    assert not _spec(loop.handle, "h100-0001").get("unschedulable")
    text = "\n".join(lines)
    assert "finding  CRITICAL gpu_xid h100-0002" in text
    assert "did cordon h100-0002" in text
    assert re.search(r"approve: \S*gpufleet actions approve \w+", text), text
    config = loop.files.config.read_text()
    assert "store_url: sqlite:///" in config and "cluster: small" in config


def test_the_demo_dashboard_groups_jobs_by_the_configs_job_label_keys(tmp_path: Path) -> None:
    """`gpufleet demo --config` with keys of one's own: the config the demo writes for its
    dashboard (and the CLI) carries them, so What-if names the jobs the demo's service does."""
    own = tmp_path / "own.yaml"
    own.write_text("service:\n  source:\n    job_label_keys: [team.example.com/run, job-name]\n")
    handle = start_simulation(small_scenario(), kubeconfig_out=tmp_path / "kc")
    try:
        opts = EmbeddedOptions(workdir=tmp_path / "wd", config=own, prometheus=False)
        embedded = assemble(handle, opts, log=DemoLog(handle.scenario.start, write=print))
        try:
            settings = demo_dashboard_settings(embedded.files.config)
        finally:
            assert embedded.close() == 0
    finally:
        handle.stop()
    assert settings.job_label_keys == ("team.example.com/run", "job-name")
    assert settings.dashboard.unauthenticated_approvals


def test_drain_approved_with_the_cli_runs_in_the_next_cycle(
    demo: tuple[Demo, list[str]],
) -> None:
    loop, lines = demo
    for _ in range(8):
        step(loop)
    assert loop.handle.cluster.get("pods", "ml", "big-worker-0")["spec"]["nodeName"] == "h100-0002"
    store = Store.open(loop.files.store_url, cluster="small")
    try:
        drain = next(a for a in store.actions() if a.playbook == "drain")
    finally:
        store.close()
    config = str(loop.files.config)
    approved = subprocess.run(
        [str(GPUFLEET), "actions", "approve", drain.id[:8], "--by", "alice", "--config", config],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert approved.returncode == 0, approved.stderr
    for _ in range(3):
        step(loop)
    text = "\n".join(lines)
    assert f"{drain.id[:8]} drain node/h100-0002: approved by alice" in text
    assert "did evict_pods h100-0002: evicted 1 pod(s)" in text
    pod = loop.handle.cluster.store.get("pods", "ml", "big-worker-0")
    assert pod is None or pod["spec"].get("nodeName") != "h100-0002"


def test_demo_in_shadow_writes_nothing_and_journals_what_it_would_do(tmp_path: Path) -> None:
    lines: list[str] = []
    loop = start_demo(tmp_path, lines, shadow=True)
    handle = loop.handle
    try:
        for _ in range(9):
            step(loop)
        assert "actuation: shadow" in loop.files.policy.read_text()
        assert not _spec(handle, "h100-0002").get("unschedulable")
        store = Store.open(loop.files.store_url, cluster="small")
        try:
            states = {a.playbook: a.state for a in store.actions()}
            results = [a.result for a in store.actions()]
        finally:
            store.close()
        assert states == {"quarantine": ActionState.SHADOW, "drain": ActionState.SHADOW}
        assert any(r.startswith("shadow: would quarantine node/h100-0002") for r in results)
    finally:
        stop_demo(loop)


def test_failed_collection_does_not_stop_the_next_cycle(
    demo: tuple[Demo, list[str]],
) -> None:
    loop, lines = demo
    assert step(loop).ok
    real = loop.cycle.collect

    def down() -> object:
        raise TemporaryError("no scrape target answered", source="test")

    loop.cycle.collect = down  # type: ignore[assignment]
    failed = step(loop)
    assert [e.stage for e in failed.errors] == ["collect"] and failed.gpus == 0
    loop.cycle.collect = real
    later = [step(loop) for _ in range(8)]
    assert all(r.ok and r.gpus == 32 for r in later)
    assert loop.cycle.failed_cycles == 1
    assert any(f.kind is FindingKind.GPU_XID for f in later[-1].findings)
    text = "\n".join(lines)
    assert "error    collect: no scrape target answered" in text
    assert "recovered" in text


@dataclass(frozen=True)
class _NoParams:
    pass


def _boom(
    snapshot: object, state: object, now: float, params: object
) -> tuple[list[Finding], None]:
    raise RuntimeError("model file missing")


def test_failing_detector_is_reported_and_the_others_still_act(
    demo: tuple[Demo, list[str]],
) -> None:
    loop, lines = demo
    boom = Detector(DetectorSpec("boom", _NoParams, _boom, (FindingKind.ANOMALY,)), _NoParams())
    loop.cycle.suite = DetectorSuite((*loop.cycle.suite.detectors, boom))
    reports = [step(loop) for _ in range(9)]
    assert all([e.stage for e in r.errors] == ["detect:boom"] for r in reports)
    assert any(f.kind is FindingKind.GPU_XID for r in reports for f in r.started)
    assert any("did cordon h100-0002" in line for line in lines)
    assert sum("error    detect:boom" in line for line in lines) == 1  # printed once, not per cycle


def test_log_groups_a_nodes_idle_gpus_into_one_line() -> None:
    lines: list[str] = []
    idle = [
        Finding(FindingKind.GPU_IDLE, Severity.INFO, f"GPU {i} idle", 100.0, 160.0,
                node="a100-0002", gpu_uuid=f"GPU-{i}")
        for i in range(8)
    ]  # fmt: skip
    DemoLog(0.0, write=lines.append, heartbeat_every=0).report(
        CycleReport(now=160.0, started=tuple(idle))
    )
    assert lines == ["[+02:40] finding  INFO gpu_idle a100-0002 (8 GPUs): GPU 0 idle"]


def test_log_names_service_events_and_notify_rules_for_what_they_are() -> None:
    """A leader election is not an action, and a notify-only rule refused nothing."""
    lines: list[str] = []

    def row(i: int, kind: str, message: str, **detail: object) -> AuditRecord:
        return AuditRecord(i, "c", 100.0, "gpufleet", kind, None, None, "node/h200-0001",
                           message, detail)  # fmt: skip

    audit = (
        row(1, "leader", "vm-1 became leader"),
        row(2, "decision", "cordon on node/h200-0001: deny",
            reasons=["rule throttle-notify: notify only"]),
        row(3, "decision", "drain on node/a-1: deny", reasons=["cooldown: drain on node/a-1"]),
    )  # fmt: skip
    DemoLog(0.0, write=lines.append, heartbeat_every=0).report(CycleReport(now=100.0, audit=audit))
    assert lines[0] == "[+01:40] leader   vm-1 became leader"
    assert lines[1] == (
        "[+01:40] notify   node/h200-0001: rule throttle-notify tells people; nothing is "
        "changed in the cluster"
    )
    assert "deny" not in lines[1]
    assert lines[2].startswith("[+01:40] policy   drain on node/a-1: deny")


def _read_until(out: IO[str], needle: str, seen: list[str], timeout: float) -> bool:
    done = threading.Event()

    def reader() -> None:
        for line in out:
            seen.append(line)
            if needle in line:
                done.set()
                return

    threading.Thread(target=reader, daemon=True).start()
    return done.wait(timeout)


def test_demo_command_reports_a_finding_and_stops_on_sigterm(tmp_path: Path) -> None:
    cmd = [
        str(GPUFLEET),
        "demo",
        "--speed",
        "10",  # the service starts in seconds (cluster claim, dashboard): the XID at 2 min
        # comes after the first cycle
        "--metrics-port",
        "0",
        "--k8s-port",
        "0",
        "--workdir",
        str(tmp_path / "wd"),
        "--kubeconfig-out",
        str(tmp_path / "kc"),
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path, env=env
    )
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        # the live demo scenario by default (as `make demo`): its XID 48 comes first
        found = _read_until(proc.stdout, "finding  CRITICAL gpu_xid a100-0002", seen, 90)
        text = "".join(seen)
        assert found, text
        assert "gpufleet is watching it" in text and "what will happen" in text
        assert "LIVE: the demo opts in with `actuation: live`" in text
        assert "actuation: live" in (tmp_path / "wd" / "demo-policy.yaml").read_text()
        assert f"gpufleet actions list --config {tmp_path / 'wd' / 'demo-config.yaml'}" in text
        assert (tmp_path / "wd" / "demo.db").exists()
        listed = subprocess.run(
            [str(GPUFLEET), "actions", "list", "--config", str(tmp_path / "wd/demo-config.yaml")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert listed.returncode == 0 and "drain" in listed.stdout, listed.stderr
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_demo_is_run_embedded_with_the_same_flags() -> None:
    """`gpufleet demo` is a name for `gpufleet run --embedded`: every flag means the same."""
    flags = ["--speed", "5", "--shadow", "--no-prometheus", "--workdir", "w", "--warmup", "30",
             "--metrics-port", "0", "--k8s-port", "0", "--dashboard-port", "-1", "--no-loop",
             "--identity", "me", "--config", "c.yaml", "--policy", "p.yaml",
             "--scenario", "s"]  # fmt: skip
    parser = build_parser()
    demo = vars(parser.parse_args(["demo", *flags]))
    run = vars(parser.parse_args(["run", "--embedded", *flags]))
    assert demo.pop("func") is run_embedded and demo.pop("command") == "demo"
    assert run.pop("func") is run_cli and run.pop("command") == "run"
    assert demo == run
