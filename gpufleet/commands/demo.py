"""`gpufleet demo`: the first thing a new user runs — a simulated GPU fleet, and gpufleet on it.

Starts the live demo scenario (`simulator/demo-live.yaml`, the one `make demo` runs) in serve mode
(exporters, kube-state-metrics and a Kubernetes API on 127.0.0.1) two minutes before its first
fault, at 1x on the wall clock like `make demo` (so the journal, the dashboard and Kubernetes read
one clock; `--speed` plays it faster, ahead of the wall clock), and runs the live
loop (gpufleet.demo.loop): collectors -> detectors -> remediation with the default policy and
the real actuator, printing what happens. `--no-loop` serves the simulator only. The wiring lives
in gpufleet.demo.loop and gpufleet.demo.banner; this module is flags and lifecycle.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

from dashboards.launcher import Dashboard, port_free
from dashboards.launcher import start as launch
from gpufleet.commands.dashboard import settings_of
from gpufleet.config import load_config
from gpufleet.demo.banner import banner
from gpufleet.demo.log import DemoLog
from gpufleet.demo.loop import DemoFiles, DemoLoop
from simulator.scenario import LIVE_DEMO_SCENARIO, Scenario, load_scenario
from simulator.serve import SimulationHandle, start_simulation, stop_on_signal

DEFAULT_DIR = Path(".gpufleet")
DEFAULT_KUBECONFIG = DEFAULT_DIR / "demo-kubeconfig"
DEFAULT_SPEED = 1.0
WARMUP = 120.0
"""Scenario seconds the demo starts before the first fault: detectors learn the healthy fleet
(counter windows, job baselines), as `gpufleet run --embedded`'s default `--warmup`."""


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="run gpufleet on a simulated GPU fleet",
        description=(
            "Serve the built-in demo fleet live on 127.0.0.1 (dcgm-exporter pages per node, "
            "kube-state-metrics, training steps and a Kubernetes API that kubectl can use) and "
            "run gpufleet on it: collectors, detectors, incidents, policy, actions, Kubernetes "
            "writes, printed as they happen."
        ),
    )
    p.add_argument("--scenario", help="scenario YAML (default: the live demo, demo-live.yaml)")
    p.add_argument(
        "--metrics-port", type=int, default=9400, metavar="P", help="exporters (0: any free)"
    )
    p.add_argument(
        "--k8s-port", type=int, default=6443, metavar="P", help="Kubernetes API (0: any free)"
    )
    p.add_argument(
        "--kubeconfig-out",
        default=str(DEFAULT_KUBECONFIG),
        metavar="FILE",
        help=f"where to write the kubeconfig (default {DEFAULT_KUBECONFIG})",
    )
    p.add_argument(
        "--workdir",
        default=str(DEFAULT_DIR),
        metavar="DIR",
        help=f"journal (demo.db, fresh each start) and demo-config.yaml (default {DEFAULT_DIR})",
    )
    p.add_argument(
        "--speed",
        type=float,
        default=DEFAULT_SPEED,
        metavar="X",
        help=f"scenario seconds per wall-clock second (default {DEFAULT_SPEED:g}: the wall clock; "
        "faster runs stamp the journal ahead of it)",
    )
    p.add_argument("--no-loop", action="store_true", help="serve the simulator only")
    p.add_argument(
        "--dashboard-port",
        type=int,
        default=8501,
        metavar="P",
        help="the dashboard on http://localhost:P (default 8501; 0: any free; -1: none)",
    )
    p.add_argument(
        "--shadow",
        dest="shadow",
        action="store_true",
        help="keep the demo's policy in shadow (actuation: shadow): decide and journal what "
        "would be done, never write to Kubernetes (the demo otherwise opts in to live)",
    )
    p.set_defaults(func=run)


def start_offset(sc: Scenario) -> float:
    """Where the demo's clock starts: WARMUP before the first fault (0 without faults)."""
    first = min((f.start for f in sc.faults), default=0.0)
    return max(0.0, first - WARMUP)


def _start(args: argparse.Namespace) -> SimulationHandle:
    sc = load_scenario(Path(args.scenario) if args.scenario else LIVE_DEMO_SCENARIO)
    offset = start_offset(sc)
    # Journal, Kubernetes objects and scenario share today's dates: the scenario begins so that
    # its clock reads the wall clock at the moment the demo starts.
    sc = sc.model_copy(update={"start": float(int(time.time() - offset))})
    kw: dict[str, Any] = {
        "kubeconfig_out": args.kubeconfig_out,
        "speed": args.speed,
        "start_offset": offset,
    }
    try:
        return start_simulation(sc, metrics_port=args.metrics_port, k8s_port=args.k8s_port, **kw)
    except OSError as exc:
        if args.metrics_port == 0 and args.k8s_port == 0:
            raise
        print(
            f"gpufleet demo: port {args.metrics_port} or {args.k8s_port} is taken "
            f"({exc.strerror or exc}); using free ports instead",
            file=sys.stderr,
        )
        return start_simulation(sc, metrics_port=0, k8s_port=0, **kw)


def run(args: argparse.Namespace) -> int:
    if args.speed <= 0:
        print("gpufleet demo: --speed must be positive", file=sys.stderr)
        return 2
    if getattr(args, "log_level", "INFO") != "DEBUG":
        # A silent exporter is the story here (the log prints its monitoring_gap finding); the
        # collector's per-cycle warning about it would only bury the commentary.
        logging.getLogger("observer.scrape.collector").setLevel(logging.ERROR)
    handle = _start(args)
    loop: DemoLoop | None = None
    dash: Dashboard | None = None
    try:
        with stop_on_signal() as stop:
            if not args.no_loop:
                files = DemoFiles(Path(args.workdir))
                report = DemoLog(handle.scenario.start, config_hint=f"--config {files.config}")
                loop = DemoLoop(handle, files, report, shadow=args.shadow).start()
                if args.dashboard_port >= 0:
                    dash = start_dashboard(files.config, args.dashboard_port, files.workdir)
            config = None if loop is None else loop.files.config
            print(banner(handle, config, shadow=args.shadow), flush=True)
            print(flush=True)
            if loop is not None:
                loop.run(stop)
            else:
                while not stop.wait(0.5):
                    pass
    finally:
        if dash is not None:
            dash.stop()
        if loop is not None:
            loop.close()
        handle.stop()
    return 0


def start_dashboard(config: Path, port: int, workdir: Path) -> Dashboard:
    """The dashboard over the demo's journal, in demo mode (no login: anyone may approve, and
    every page says so); its URL is printed first."""
    cfg, _ = load_config(config)
    policy = config.parent / cfg.policy if cfg.policy else None  # the demo's own policy file
    settings = settings_of(cfg, policy, unauthenticated_approvals=True)
    if port and not port_free(port):
        print(f"gpufleet demo: port {port} is taken; the dashboard uses a free port instead",
              file=sys.stderr)  # fmt: skip
        port = 0
    dash = launch(settings, port, workdir=workdir)
    print(f"Dashboard: {dash.url}  (Streamlit log: {workdir / 'dashboard.log'})", flush=True)
    return dash
