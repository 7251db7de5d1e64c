"""The embedded demo's assembly: the production service (gpufleet.service.assembly.build) on a
simulated fleet running in this process. What `gpufleet run --embedded`, `gpufleet demo` and
`make demo` start, and what tests drive cycle by cycle on a manual clock.

Around a running simulation (simulator.serve) it sets up what a live gpufleet needs: a fresh
SQLite journal, the config and demo policy under the workdir that `gpufleet actions|audit|policy`
read (gpufleet.demo.files), the metrics source (the local Prometheus when installed and the demo
runs at 1x, else direct scrape of the simulator's exporters), and the demo's service config
(`demo.yaml`: a schedule whose jobs fire within minutes). The demo opts in to writing
(`actuation: live`) unless told `shadow`, or given a policy of its own.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.config import GpufleetConfig, load_config
from gpufleet.demo import prometheus as demo_prometheus
from gpufleet.demo.files import DemoFiles, fresh_store, write_config
from gpufleet.demo.log import DemoLog
from gpufleet.service.assembly import build, identity_of
from gpufleet.service.runtime import Service
from gpufleet.service.source_config import PrometheusSource
from gpufleet.service.sources import (
    CollectorSettings,
    prometheus_settings,
    scrape_settings,
    source_settings,
)
from lab import local_prometheus as lp
from remediations.policy import Policy, load_policy
from remediations.types import Actuation
from simulator.scenario import LIVE_DEMO_SCENARIO, Scenario, load_scenario
from simulator.serve import SimulationHandle, start_simulation

DEMO_CONFIG = Path(__file__).parent / "demo.yaml"
WARMUP = 120.0
"""Scenario seconds the demo starts before its first fault: detectors learn the healthy fleet."""


@dataclass(frozen=True, slots=True)
class EmbeddedOptions:
    workdir: Path = Path(".gpufleet")
    config: Path | None = None
    """The service config (default: the demo's, demo.yaml)."""
    policy: Path | None = None
    """A policy of one's own (default: the config's, else the demo's, written at start)."""
    prometheus: bool = True
    """Read the local Prometheus when installed (1x only); False: scrape the exporters."""
    identity: str | None = None
    shadow: bool = False
    """Keep the demo's policy in shadow: decide and journal, never write to Kubernetes."""


@dataclass(frozen=True, slots=True)
class EmbeddedConfig:
    """Config and policy, validated before the simulation starts (errors name the file)."""

    cfg: GpufleetConfig
    path: Path
    policy: Policy | None
    """None: the demo's own policy, written at assembly."""


@dataclass
class Embedded:
    """The service over the simulated fleet, and what it runs beside (closed with `close`)."""

    service: Service
    files: DemoFiles
    shadow: bool
    prometheus: lp.PrometheusHandle | None = None

    @property
    def collect(self) -> str:
        return "read Prometheus" if self.prometheus is not None else "scrape exporters"

    def close(self) -> int:
        """Stop the service (its journal, collectors and clients), then Prometheus."""
        try:
            return self.service.shutdown()
        finally:
            if self.prometheus is not None:
                self.prometheus.stop()


def load_embedded(opts: EmbeddedOptions) -> EmbeddedConfig:
    cfg, path = load_config(opts.config or DEMO_CONFIG)
    assert path is not None  # an explicit path always loads from a file
    chosen = opts.policy or (path.parent / cfg.policy if cfg.policy else None)
    return EmbeddedConfig(cfg, path, load_policy(chosen) if chosen is not None else None)


def start_offset(sc: Scenario, warmup: float = WARMUP) -> float:
    """Where the demo's clock starts: `warmup` before the first fault (0 without faults)."""
    first = min((f.start for f in sc.faults), default=0.0)
    return max(0.0, first - warmup)


def start_fleet(
    scenario: Path | None,
    *,
    speed: float,
    warmup: float,
    metrics_port: int,
    k8s_port: int,
    kubeconfig_out: Path,
    prog: str = "gpufleet run",
) -> SimulationHandle:
    """The demo fleet served on 127.0.0.1, its clock reading the wall clock at start (`warmup`
    before its first fault); taken ports fall back to free ones, said on stderr."""
    sc = load_scenario(scenario or LIVE_DEMO_SCENARIO)
    offset = start_offset(sc, warmup)
    sc = sc.model_copy(update={"start": float(int(time.time() - offset))})
    kw: dict[str, Any] = {"kubeconfig_out": kubeconfig_out, "speed": speed, "start_offset": offset}
    try:
        return start_simulation(sc, metrics_port=metrics_port, k8s_port=k8s_port, **kw)
    except OSError as exc:
        if metrics_port == 0 and k8s_port == 0:
            raise
        print(f"{prog}: port {metrics_port} or {k8s_port} is taken ({exc.strerror or exc}); "
              "using free ports instead", file=sys.stderr)  # fmt: skip
        return start_simulation(sc, metrics_port=0, k8s_port=0, **kw)


def service_clock(handle: SimulationHandle) -> Callable[[], float]:
    """The clock the embedded service stamps everything with. At 1x (the default) it is the
    wall clock itself, as in production: the dashboard, the CLI, Kubernetes objects, Prometheus
    and the journal then agree to the second. Faster runs keep the scenario's clock (the
    journal runs ahead of the wall clock; fine for tests, confusing on screens)."""
    return time.time if handle.clock.speed == 1.0 else handle.clock


def slack_to_file(path: Path) -> None:
    """The demo has no Slack token: the messages it would send go to `path`, not the story."""
    handler = logging.FileHandler(path, mode="w", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    lg = logging.getLogger("alerts.slack.log_only")
    lg.addHandler(handler)
    lg.propagate = False


def _source(
    cfg: GpufleetConfig, handle: SimulationHandle, prom: lp.PrometheusHandle | None
) -> CollectorSettings:
    section, cluster = cfg.service.source, handle.scenario.cluster
    if (configured := source_settings(section, cluster)) is not None:
        return configured
    if prom is not None:
        return prometheus_settings(section, cluster, PrometheusSource(url=prom.url))
    return scrape_settings(section, cluster, discovery_url=f"{handle.metrics_url}/targets")


def assemble(
    handle: SimulationHandle,
    opts: EmbeddedOptions,
    conf: EmbeddedConfig | None = None,
    *,
    clock: Callable[[], float] | None = None,
    log: DemoLog | None = None,
) -> Embedded:
    """The service over `handle`'s fleet, not started (`service.start()` schedules it; tests
    call `service.lead()` and `service.cycle_now()` instead). `clock`: journal time (default
    `service_clock`); `log`: the commentary (default: printed)."""
    conf = conf or load_embedded(opts)
    assert handle.kubeconfig is not None, "the embedded service needs the fleet's kubeconfig"
    cfg, cluster, speed = conf.cfg, handle.scenario.cluster, handle.clock.speed
    files = DemoFiles(opts.workdir)
    store = fresh_store(files, cluster)
    prom = None
    try:
        # Prometheus stamps samples with the wall clock: only a 1x demo can read it back.
        if opts.prometheus and speed == 1.0:
            prom = demo_prometheus.start(handle, files.workdir)
        write_config(
            files,
            cluster,
            handle.kubeconfig,
            actuation=Actuation.SHADOW if opts.shadow or cfg.shadow else Actuation.LIVE,
            metering=cfg.metering,
            prometheus_url=prom.url if prom is not None else None,
            job_label_keys=cfg.service.source.job_label_keys,
        )
        # The demo opts in explicitly: the policy it just wrote says `actuation: live`
        # (shadow when asked, or when the config says `shadow: true`), and the banner says so.
        policy = conf.policy or load_policy(files.policy)
        cfg = cfg.model_copy(
            update={"cluster": cluster, "store_url": files.store_url, "kubeconfig": None}
        )
        parts, _ = build(
            cfg,
            policy,
            identity_of(opts.identity, cfg),
            store=store,
            kubeconfig=str(handle.kubeconfig),
            scrape=_source(cfg, handle, prom),
            clock=clock or service_clock(handle),
            interval=(cfg.service.interval or handle.scenario.scrape_interval) / speed,
            speed=speed,
            source_name=str(conf.path),
        )
    except BaseException:
        store.close()
        if prom is not None:
            prom.stop()
        raise
    commentary = log or DemoLog(handle.scenario.start, config_hint=f"--config {files.config}")
    parts.on_report = commentary.report
    parts.first_cycle_in = 1.0 / speed
    return Embedded(Service(parts), files, opts.shadow or cfg.shadow, prom)
