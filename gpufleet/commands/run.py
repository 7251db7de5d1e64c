"""`gpufleet run --config F`: the long-running service (gpufleet.service).

Production: the metrics from `service.source` (the cluster's Prometheus, or direct scrape of
the exporters), the Kubernetes API from `kubeconfig` (none: in-cluster), the journal at
`store_url`, leader election when enabled. `--check-config` validates the config and policy and
exits (0, or 2 naming file, field path and expectation) without opening anything.
`--embedded` starts the simulated demo fleet in this process and runs the same service on it
(gpufleet.demo.embedded: direct scrape of the simulator unless Prometheus is installed or the
config names a source, a fresh SQLite journal under --workdir, the simulator's API, a demo
schedule whose jobs fire within the first minutes), printing the demo's banner and commentary:
what `make demo` and `gpufleet demo` run. Both modes assemble the service with
gpufleet.service.assembly.build; this module is flags and lifecycle.
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
from dashboards.settings import DashboardSettings
from errors import GpufleetError
from gpufleet.children import die_with_this_process
from gpufleet.commands.dashboard import settings_of
from gpufleet.config import add_arguments, load_all, load_config
from gpufleet.demo import prometheus as demo_prometheus
from gpufleet.demo.banner import banner
from gpufleet.demo.embedded import (
    WARMUP,
    Embedded,
    EmbeddedOptions,
    assemble,
    load_embedded,
    slack_to_file,
    start_fleet,
)
from gpufleet.service.assembly import build, identity_of
from gpufleet.service.cluster_claim import ClusterMismatch
from gpufleet.service.runtime import Service
from gpufleet.service.sources import source_settings
from remediations.store import Store
from simulator.serve import SimulationHandle, stop_on_signal

log = logging.getLogger(__name__)
DEFAULT_INTERVAL = 30.0


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "run",
        help="run gpufleet as a service: live cycle, scheduled jobs, health and metrics",
        description=(
            "Run the live cycle (collect, detect, incidents, decide, act) every interval and the "
            "scheduled remediation jobs of the config's `service.schedule`, with leader "
            "election, /healthz, /readyz and /metrics. SIGTERM stops it cleanly."
        ),
    )
    add_arguments(p)
    p.add_argument(
        "--check-config",
        action="store_true",
        help="validate --config and its policy (exit 0, or 2 naming what is wrong); start nothing",
    )
    p.add_argument(
        "--embedded",
        action="store_true",
        help="start the simulated demo fleet in-process and run against it (make demo, "
        "gpufleet demo)",
    )
    add_embedded_arguments(p)
    p.set_defaults(func=run)


def add_embedded_arguments(p: argparse.ArgumentParser) -> None:
    """`--identity` and the embedded demo's flags (shared with `gpufleet demo`)."""
    p.add_argument("--identity", help="leader-election identity (default <hostname>-<pid>)")
    p.add_argument(
        "--scenario", help="embedded: scenario YAML (default: the live demo, demo-live.yaml)"
    )
    p.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="embedded: scenario seconds per wall second (default 1: every screen, Kubernetes "
        "and Prometheus on the wall clock; faster runs put the journal ahead of the wall clock)",
    )
    p.add_argument(
        "--workdir",
        default=".gpufleet",
        help="embedded: journal (demo.db, fresh each start), demo-config.yaml and "
        "demo-policy.yaml (default .gpufleet)",
    )
    p.add_argument(
        "--metrics-port", type=int, default=9400, help="embedded: exporters port (0: any free)"
    )
    p.add_argument(
        "--k8s-port", type=int, default=6443, help="embedded: Kubernetes API port (0: any free)"
    )
    p.add_argument(
        "--kubeconfig-out", default=".gpufleet/demo-kubeconfig", help="embedded: kubeconfig"
    )
    p.add_argument(
        "--no-prometheus",
        dest="prometheus",
        action="store_false",
        help="embedded: scrape the exporters directly even when Prometheus is installed",
    )
    p.add_argument(
        "--warmup",
        type=float,
        default=WARMUP,
        help=f"embedded: scenario seconds before the first fault at start (default {WARMUP:g})",
    )
    p.add_argument(
        "--dashboard-port",
        type=int,
        default=8501,
        metavar="P",
        help="embedded: the dashboard on http://localhost:P (default 8501; 0: any free; -1: none)",
    )
    p.add_argument(
        "--shadow",
        action="store_true",
        help="embedded: keep the demo's policy in shadow (actuation: shadow): decide and journal "
        "what would be done, never write to Kubernetes (the demo otherwise opts in to live)",
    )
    p.add_argument(
        "--no-loop",
        action="store_true",
        help="embedded: serve the simulated fleet only (no service, no dashboard)",
    )


def run(args: argparse.Namespace) -> int:
    if getattr(args, "log_level", "INFO") != "DEBUG":
        # One line per run of every job at INFO would bury the service's own log.
        logging.getLogger("apscheduler").setLevel(logging.WARNING)
    if args.embedded:
        return run_embedded(args)
    cfg, policy = load_all(args)
    svc = cfg.service
    scrape = source_settings(svc.source, cfg.cluster)
    if scrape is None:
        print(
            f"gpufleet run: {args.config or '<no --config>'}: service.source: expected "
            "`prometheus`, `discovery_url` or `targets` (or use --embedded)",
            file=sys.stderr,
        )
        return 2
    if args.check_config:
        print(f"gpufleet run: {args.config or '<defaults>'}: config and policy are valid "
              f"(source: {svc.source.chosen()[0]}, cluster: {cfg.cluster})")  # fmt: skip
        return 0
    identity = identity_of(args.identity, cfg)
    store = Store.open(cfg.store_url, cluster=cfg.cluster)
    try:
        parts, _ = build(
            cfg,
            policy,
            identity,
            store=store,
            kubeconfig=cfg.kubeconfig,
            scrape=scrape,
            clock=time.time,
            interval=svc.interval or DEFAULT_INTERVAL,
            source_name=str(args.config or "<defaults>"),
        )
    except ClusterMismatch as exc:
        store.close()
        print(f"gpufleet run: {args.config or '<defaults>'}: cluster: {exc.render()}",
              file=sys.stderr)  # fmt: skip
        return 2
    except GpufleetError as exc:
        store.close()
        print(f"gpufleet run: cannot start: {exc.render()}", file=sys.stderr)
        return 1
    parts.on_report = _log_report
    service = Service(parts)
    with stop_on_signal() as stop:
        service.start()
        print(f"gpufleet run: {identity} serving {service.http.url}", flush=True)
        stop.wait()
    return service.shutdown()


def _log_report(r: Any) -> None:
    log.info(
        "cycle: %d GPUs, %d findings, %d open incidents, %d awaiting approval, %.2fs%s",
        r.gpus,
        len(r.findings),
        r.open_incidents,
        r.awaiting_approval,
        r.seconds,
        "" if r.ok else f", errors: {[e.stage for e in r.errors]}",
    )


def demo_dashboard_settings(config: Path) -> DashboardSettings:
    """The demo dashboard's settings from the config the demo wrote (its journal, policy and
    the service's job-name label keys), with approvals open to anyone (no login)."""
    cfg, _ = load_config(config)
    policy = config.parent / cfg.policy if cfg.policy else None  # the demo's own policy file
    return settings_of(cfg, policy, unauthenticated_approvals=True)


def start_dashboard(config: Path, port: int, workdir: Path) -> Dashboard:
    """The dashboard over the demo's journal, in demo mode (no login: anyone may approve, and
    every page says so); its URL is printed first."""
    settings = demo_dashboard_settings(config)
    if port and not port_free(port):
        print(f"gpufleet: port {port} is taken; the dashboard uses a free port instead",
              file=sys.stderr)  # fmt: skip
        port = 0
    dash = launch(settings, port, workdir=workdir, child_setup=die_with_this_process())
    print(f"Dashboard: {dash.url}  (Streamlit log: {workdir / 'dashboard.log'})", flush=True)
    return dash


def options_of(args: argparse.Namespace) -> EmbeddedOptions:
    return EmbeddedOptions(
        workdir=Path(args.workdir),
        config=Path(args.config) if args.config else None,
        policy=Path(args.policy) if getattr(args, "policy", None) else None,
        prometheus=args.prometheus,
        identity=args.identity,
        shadow=args.shadow,
    )


def run_embedded(args: argparse.Namespace) -> int:
    """`gpufleet run --embedded` (and `gpufleet demo`): the demo fleet, the service on it."""
    prog = "gpufleet demo" if args.command == "demo" else "gpufleet run"
    if args.speed <= 0:
        print(f"{prog}: --speed must be positive", file=sys.stderr)
        return 2
    opts = options_of(args)
    conf = load_embedded(opts)  # config and policy errors before anything starts
    if getattr(args, "log_level", "INFO") != "DEBUG":
        logging.getLogger("observer.scrape.collector").setLevel(logging.ERROR)
        logging.getLogger("gpufleet.service").setLevel(logging.WARNING)
    handle = start_fleet(
        Path(args.scenario) if args.scenario else None,
        speed=args.speed,
        warmup=args.warmup,
        metrics_port=args.metrics_port,
        k8s_port=args.k8s_port,
        kubeconfig_out=Path(args.kubeconfig_out),
        prog=prog,
    )
    try:
        if args.no_loop:
            return _serve_only(handle)
        embedded = assemble(handle, opts, conf)
        return _serve(embedded, handle, args)
    finally:
        handle.stop()


def _serve_only(handle: SimulationHandle) -> int:
    with stop_on_signal() as stop:
        print(banner(handle, None), flush=True)
        stop.wait()
    return 0


def _serve(embedded: Embedded, handle: SimulationHandle, args: argparse.Namespace) -> int:
    files, service = embedded.files, embedded.service
    if getattr(args, "log_level", "INFO") != "DEBUG":
        slack_to_file(files.workdir / "slack.log")
    dash: Dashboard | None = None
    try:
        with stop_on_signal() as stop:
            if args.dashboard_port >= 0:  # its URL first: that is where a new user looks
                dash = start_dashboard(files.config, args.dashboard_port, files.workdir)
            print(banner(handle, files.config, shadow=embedded.shadow, collect=embedded.collect),
                  flush=True)  # fmt: skip
            print("prometheus    " + _prometheus_line(embedded, handle, args), flush=True)
            service.start()
            print(f"service       {service.http.url}  (/healthz /readyz /metrics)", flush=True)
            for e in service.entries:
                print(f"schedule      {e.name}: {e.kind} at `{e.cron}` ({e.timezone})", flush=True)
            print(flush=True)
            stop.wait()
    finally:
        try:
            code = embedded.close()
        finally:
            if dash is not None:
                dash.stop()
    return code


def _prometheus_line(embedded: Embedded, handle: SimulationHandle, a: argparse.Namespace) -> str:
    prom = embedded.prometheus
    if prom is not None:
        return (f"{prom.url} (scrapes the simulator every {demo_prometheus.SCRAPE_INTERVAL:g} s; "
                "the service, What-if, incident history and the Jobs heatmap read it)")  # fmt: skip
    if a.prometheus and handle.clock.speed == 1.0:
        return demo_prometheus.MISSING
    return "off (--no-prometheus, or a speed other than 1x): direct scrape"
