"""`gpufleet run --config F`: the long-running service (gpufleet.service).

Production: the metrics from `service.source` (the cluster's Prometheus, or direct scrape of
the exporters), the Kubernetes API from `kubeconfig` (none: in-cluster), the journal at
`store_url`, leader election when enabled. `--check-config` validates the config and policy and
exits (0, or 2 naming file, field path and expectation) without opening anything.
`--embedded` starts the simulated demo fleet in this process and runs the same service on it
(direct scrape of the simulator unless the config names a Prometheus source, a fresh SQLite
journal under --workdir, the simulator's API, a demo schedule
whose jobs fire within the first minutes), printing the demo's banner and commentary: what
`make demo` runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from alerts import AlertsRuntime
from dashboards.launcher import Dashboard
from errors import GpufleetError, TemporaryError
from gpufleet.commands.demo import start_dashboard
from gpufleet.config import GpufleetConfig, add_arguments, detector_suite, load_all, load_config
from gpufleet.demo import prometheus as demo_prometheus
from gpufleet.demo.banner import banner
from gpufleet.demo.log import DemoLog
from gpufleet.demo.loop import DemoFiles, fresh_store, write_config
from gpufleet.live_cycle import LiveCycle
from gpufleet.service.cluster_claim import ClusterMismatch, claim_cluster
from gpufleet.service.leader import LeaderElector
from gpufleet.service.runtime import Service, ServiceParts
from gpufleet.service.sources import CollectorSettings, open_source, source_settings
from gpufleet.service.telemetry import Telemetry
from gpufleet.service.tracing import traced_suite
from gpufleet.service.write_tracing import traced_writes
from kube.actuator import KubeActuator
from kube.identity import cluster_uid
from kube.jobs import KubeNodeJobs, api_client
from kube.lease import KubeLeaseClient
from lab import local_prometheus as lp
from metering import Meter
from observer.kube.collector import KubeCollector, KubeSettings
from observer.prometheus.plan import PromSettings
from observer.scrape.collector import ScrapeSettings
from remediations.cycle import RemediationCycle
from remediations.policy import Policy, load_policy
from remediations.store import Store
from remediations.types import Actuation
from simulator.scenario import LIVE_DEMO_SCENARIO, load_scenario
from simulator.serve import SimulationHandle, start_simulation, stop_on_signal

log = logging.getLogger(__name__)
DEMO_CONFIG = Path(__file__).parent.parent / "service" / "demo.yaml"
DEFAULT_INTERVAL = 30.0
SYNC_TIMEOUT = 10.0
BACKOFF_SLICE = 0.25
"""Wall seconds between looks at leadership during an actuator back-off."""


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
    p.add_argument("--identity", help="leader-election identity (default <hostname>-<pid>)")
    p.add_argument(
        "--embedded",
        action="store_true",
        help="start the simulated demo fleet in-process and run against it (make demo)",
    )
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
    p.add_argument("--workdir", default=".gpufleet", help="embedded: journal and config dir")
    p.add_argument("--metrics-port", type=int, default=9400, help="embedded: exporters port")
    p.add_argument("--k8s-port", type=int, default=6443, help="embedded: Kubernetes API port")
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
        default=120.0,
        help="embedded: scenario seconds before the first fault at start (default 120)",
    )
    p.add_argument(
        "--dashboard-port",
        type=int,
        default=8501,
        metavar="P",
        help="embedded: the dashboard on http://localhost:P (default 8501; 0: any free; -1: none)",
    )
    p.set_defaults(func=run)


def identity_of(args: argparse.Namespace, cfg: GpufleetConfig) -> str:
    return str(
        args.identity
        or cfg.service.leader_election.identity
        or f"{socket.gethostname()}-{os.getpid()}"
    )


def _sleeper(
    halt: threading.Event, leading: threading.Event, speed: float
) -> Callable[[float], None]:
    """The actuator's back-off (PDB retries), cut short when the service stops or stops
    leading: the action stays at its journaled step and resumes on the next run or leader."""

    def sleep(seconds: float) -> None:
        until = time.monotonic() + seconds / speed
        while (left := until - time.monotonic()) > 0:
            if halt.wait(min(left, BACKOFF_SLICE)):
                raise TemporaryError("the service is stopping; the action resumes on the next run")
            if not leading.is_set():
                raise TemporaryError("this process no longer leads; the next leader resumes it")

    return sleep


def build(
    cfg: GpufleetConfig,
    policy: Policy,
    identity: str,
    *,
    store: Store,
    kubeconfig: str | None,
    scrape: CollectorSettings,
    clock: Callable[[], float],
    interval: float,
    speed: float = 1.0,
    source_name: str = "<config>",
) -> tuple[ServiceParts, threading.Event]:
    svc = cfg.service
    _claim_cluster(store, kubeconfig, identity)
    telemetry = Telemetry(svc.telemetry, identity)
    halt = threading.Event()
    leading = threading.Event()
    closers: list[Callable[[], None]] = [store.close]
    kube = KubeCollector(KubeSettings(kubeconfig=kubeconfig)).start()
    closers.append(kube.stop)
    if not kube.wait_synced(SYNC_TIMEOUT):
        log.warning("Kubernetes collector not synced after %.0f s; starting anyway", SYNC_TIMEOUT)
    collect, close_source = open_source(scrape, kube, clock)
    closers.append(close_source)
    actuator = KubeActuator.from_kubeconfig(
        kubeconfig, clock=clock, sleep=_sleeper(halt, leading, speed)
    )
    closers.append(actuator.close)
    cycle = RemediationCycle(
        policy,
        store,
        actuator,
        identity,
        started_at=clock() - interval * speed,
        shadow=cfg.shadow,
        clock=clock,
        background=True,  # a drain waiting on a PDB never delays a detection cycle
        idle_wait=max(0.2, min(5.0, interval)),
        device_taints=actuator.device_taints_served,
        around_write=traced_writes(telemetry),
    )
    suite, grace = detector_suite(cfg, source_name)
    alerts = _alerts(cfg, store, cycle, clock, source_name, closers, telemetry)
    live = LiveCycle(
        collect,
        traced_suite(suite, telemetry),
        cycle,
        meter=Meter(store, cfg.metering),
        extra_findings=alerts.intake_findings if alerts is not None else None,
        grace_cycles=grace,
        span=telemetry.span,
    )
    diag = KubeNodeJobs(api_client(kubeconfig))
    closers.append(diag.close)
    elector = None
    le = svc.leader_election
    if le.enabled:
        lease = KubeLeaseClient(api_client(kubeconfig), le.namespace, le.lease_name)
        closers.append(lease.close)
        elector = LeaderElector(
            lease, identity, lease_duration=le.lease_duration, renew_every=le.renew_every
        )
    parts = ServiceParts(
        cfg=svc,
        store=store,
        live=live,
        cycle=cycle,
        clock=clock,
        interval=interval,
        identity=identity,
        telemetry=telemetry,
        elector=elector,
        diagnostics=diag,
        metering=cfg.metering,
        alerts=alerts,
        closers=closers,
        halt=halt,
        leading=leading,
    )
    return parts, halt


def _claim_cluster(store: Store, kubeconfig: str | None, identity: str) -> None:
    """One journal per cluster: bind the configured name to this cluster's kube-system UID, or
    refuse (ClusterMismatch) when the name belongs to another cluster; before anything starts."""
    api = api_client(kubeconfig)
    try:
        uid, server = cluster_uid(api)
    finally:
        api.close()  # type: ignore[no-untyped-call]
    claim_cluster(store.engine, store.cluster, uid, server, identity, time.time())


def _alerts(
    cfg: GpufleetConfig,
    store: Store,
    cycle: RemediationCycle,
    clock: Callable[[], float],
    source_name: str,
    closers: list[Callable[[], None]],
    telemetry: Telemetry,
) -> AlertsRuntime | None:
    """Slack and Alertmanager: messages after each cycle (to the log and the store without a
    token), the Slack listener when `alerts.http.enabled`, the Alertmanager webhook's when
    `alerts.webhook_http.enabled`, Socket Mode when an app token is set."""
    if not cfg.alerts.enabled:
        return None
    source = Path(source_name)
    acfg = cfg.alerts.relative_to(source if source.is_file() else None)
    rt = AlertsRuntime(acfg, store, cycle.journal, clock=clock, started_at=cycle.journal.started_at)
    if acfg.http.enabled:
        server = rt.serve(on_refused=telemetry.refused)
        closers.append(server.close)
        log.info("Slack endpoints on %s:%d", acfg.http.host, server.port)
    if acfg.webhook_http.enabled:
        webhook = rt.serve_webhook(on_refused=telemetry.refused)
        closers.append(webhook.close)
        log.info("Alertmanager webhook on %s:%d", acfg.webhook_http.host, webhook.port)
    if acfg.secret("app_token"):
        link = rt.socket_mode()
        closers.append(link.close)
    return rt


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
    identity = identity_of(args, cfg)
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


def _start_simulation(args: argparse.Namespace) -> SimulationHandle:
    sc = load_scenario(Path(args.scenario) if args.scenario else LIVE_DEMO_SCENARIO)
    first = min((f.start for f in sc.faults), default=0.0)
    offset = max(0.0, first - args.warmup)
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
            f"gpufleet run: port {args.metrics_port} or {args.k8s_port} is taken "
            f"({exc.strerror or exc}); using free ports instead",
            file=sys.stderr,
        )
        return start_simulation(sc, metrics_port=0, k8s_port=0, **kw)


def _slack_to_file(path: Path) -> None:
    """The demo has no Slack token: the messages it would send go to `path`, not the story."""
    handler = logging.FileHandler(path, mode="w", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    lg = logging.getLogger("alerts.slack.log_only")
    lg.addHandler(handler)
    lg.propagate = False


def service_clock(handle: SimulationHandle) -> Callable[[], float]:
    """The clock the embedded service stamps everything with. At 1x (the default) it is the
    wall clock itself, as in production: the dashboard, the CLI, Kubernetes objects, Prometheus
    and the journal then agree to the second. Faster runs keep the scenario's clock (the
    journal runs ahead of the wall clock; fine for tests, confusing on screens)."""
    return time.time if handle.clock.speed == 1.0 else handle.clock


def run_embedded(args: argparse.Namespace) -> int:
    if args.speed <= 0:
        print("gpufleet run: --speed must be positive", file=sys.stderr)
        return 2
    cfg, cfg_path = load_config(args.config or DEMO_CONFIG)
    if args.config is None:
        args.config = str(DEMO_CONFIG)
    _, policy = load_all(args)
    if getattr(args, "log_level", "INFO") != "DEBUG":
        logging.getLogger("observer.scrape.collector").setLevel(logging.ERROR)
        logging.getLogger("gpufleet.service").setLevel(logging.WARNING)
    handle = _start_simulation(args)
    dash: Dashboard | None = None
    prom: lp.PrometheusHandle | None = None
    try:
        assert handle.kubeconfig is not None
        cluster = handle.scenario.cluster
        files = DemoFiles(Path(args.workdir))
        store = fresh_store(files, cluster)
        # Prometheus stamps samples with the wall clock: only a 1x demo can read it back.
        if args.prometheus and handle.clock.speed == 1.0:
            prom = demo_prometheus.start(handle, files.workdir)
        write_config(
            files,
            cluster,
            handle.kubeconfig,
            actuation=Actuation.SHADOW if cfg.shadow else Actuation.LIVE,
            metering=cfg.metering,
            prometheus_url=prom.url if prom is not None else None,
        )
        if cfg.policy is None and getattr(args, "policy", None) is None:
            # The demo opts in explicitly: the policy it just wrote says `actuation: live`
            # (shadow when the config says `shadow: true`), and the banner says so.
            policy = load_policy(files.policy)
        cfg = cfg.model_copy(
            update={"cluster": cluster, "store_url": files.store_url, "kubeconfig": None}
        )
        speed = handle.clock.speed
        interval = (cfg.service.interval or handle.scenario.scrape_interval) / speed
        parts, _ = build(
            cfg,
            policy,
            identity_of(args, cfg),
            store=store,
            kubeconfig=str(handle.kubeconfig),
            scrape=source_settings(cfg.service.source, cluster)
            or (PromSettings(prom.url, cluster=cluster) if prom is not None else None)
            or ScrapeSettings(discovery_url=f"{handle.metrics_url}/targets", cluster=cluster),
            clock=service_clock(handle),
            interval=interval,
            speed=speed,
            source_name=str(cfg_path),
        )
        if getattr(args, "log_level", "INFO") != "DEBUG":
            _slack_to_file(files.workdir / "slack.log")
        report = DemoLog(handle.scenario.start, config_hint=f"--config {files.config}")
        parts.on_report = report.report
        parts.first_cycle_in = 1.0 / speed
        service = Service(parts)
        with stop_on_signal() as stop:
            if args.dashboard_port >= 0:  # its URL first: that is where a new user looks
                dash = start_dashboard(files.config, args.dashboard_port, files.workdir)
            collect = "read Prometheus" if prom is not None else "scrape exporters"
            print(banner(handle, files.config, shadow=cfg.shadow, collect=collect), flush=True)
            print(
                "prometheus    "
                + (
                    f"{prom.url} (scrapes the simulator every {demo_prometheus.SCRAPE_INTERVAL:g}"
                    " s; the service, What-if, incident history and the Jobs heatmap read it)"
                    if prom is not None
                    else demo_prometheus.MISSING
                    if args.prometheus and handle.clock.speed == 1.0
                    else "off (--no-prometheus, or a speed other than 1x): direct scrape"
                ),
                flush=True,
            )
            service.start()
            print(f"service       {service.http.url}  (/healthz /readyz /metrics)", flush=True)
            for e in service.entries:
                print(f"schedule      {e.name}: {e.kind} at `{e.cron}` ({e.timezone})", flush=True)
            print(flush=True)
            stop.wait()
        return service.shutdown()
    finally:
        if dash is not None:
            dash.stop()
        if prom is not None:
            prom.stop()
        handle.stop()
