"""Serve mode: a scenario as a live fleet — exporters, kube-state-metrics and a Kubernetes API.

One composition of the simulator's parts, used by `gpufleet simulate --serve`, `gpufleet demo`
and the tests: the live cluster (`SimCluster`) is the single truth; the Kubernetes API changes it,
the exporters render the metric engine with its current placement, and one clock maps wall time
to scenario time (`speed` scenario seconds per wall second). `start_simulation` returns a handle
(stop it, or use it as a context manager); `run_server` blocks until SIGINT/SIGTERM.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from simulator.clock import SimClock
from simulator.cluster import ClusterOptions, SimCluster
from simulator.engine import FleetSimulator
from simulator.exporter_pods import ExporterPods
from simulator.kube_api.faults import FaultInjector
from simulator.kube_api.server import KubeApiServer
from simulator.layout import Layout, build_layout
from simulator.metrics_server import LiveMetrics, MetricsServer
from simulator.scenario import Scenario, demo_scenario


@dataclass
class SimulationHandle:
    """A running simulation: its endpoints, clock, cluster state and fault injector."""

    scenario: Scenario
    layout: Layout
    clock: SimClock
    cluster: SimCluster
    engine: FleetSimulator
    k8s: KubeApiServer
    metrics: MetricsServer
    kubeconfig: Path | None
    exporter_pods: ExporterPods | None = None
    """Each node's exporter on its own port behind its dcgm-exporter pod (`exporter_pods=`)."""
    _ticker: threading.Thread | None = None
    _stopped: threading.Event = field(default_factory=threading.Event)

    @property
    def k8s_url(self) -> str:
        return self.k8s.url

    @property
    def k8s_port(self) -> int:
        return self.k8s.port

    @property
    def metrics_url(self) -> str:
        return self.metrics.url

    @property
    def metrics_port(self) -> int:
        return self.metrics.port

    @property
    def faults(self) -> FaultInjector:
        """Arm Kubernetes API faults: `handle.faults.add(path_regex, 429, count=2)`."""
        return self.k8s.faults

    def node_metrics_url(self, node: str) -> str:
        return self.metrics.node_url(node)

    @property
    def kube_state_metrics_url(self) -> str:
        return f"{self.metrics.url}/kube-state-metrics/metrics"

    @property
    def jobs_metrics_url(self) -> str:
        return f"{self.metrics.url}/jobs/metrics"

    def targets(self) -> list[str]:
        return self.metrics.target_urls()

    def describe(self) -> str:
        """Every endpoint, for people."""
        lines = [
            f"scenario      {self.scenario.name} ({len(self.layout.nodes)} nodes, "
            f"{len(self.layout.gpu_uuid)} GPUs), speed x{self.clock.speed:g}",
            f"kubernetes    {self.k8s_url}",
        ]
        if self.kubeconfig is not None:
            lines.append(f"kubeconfig    {self.kubeconfig}")
        lines += [
            f"dcgm-exporter {self.metrics_url}/nodes/<node>/metrics  (e.g. "
            f"{self.node_metrics_url(self.layout.nodes[0].name)})",
            f"kube-state    {self.kube_state_metrics_url}",
            f"job steps     {self.jobs_metrics_url}",
            f"targets       {self.metrics_url}/targets  (Prometheus file_sd: ?format=file_sd)",
            f"health        {self.metrics_url}/healthz",
        ]
        return "\n".join(lines)

    def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        self.metrics.stop()
        if self.exporter_pods is not None:
            self.exporter_pods.stop()
        self.k8s.stop()
        if self._ticker is not None:
            self._ticker.join(timeout=5)

    def __enter__(self) -> SimulationHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_simulation(
    scenario: Scenario | None = None,
    *,
    metrics_port: int = 0,
    k8s_port: int = 0,
    kubeconfig_out: str | Path | None = None,
    speed: float = 1.0,
    host: str = "127.0.0.1",
    wall: Callable[[], float] = time.time,
    options: ClusterOptions | None = None,
    tick_interval: float = 0.5,
    bookmark_interval: float = 10.0,
    start_offset: float = 0.0,
    pod_labels: str = "direct",
    fields: Collection[str] | None = None,
    exporter_pods: str | None = None,
) -> SimulationHandle:
    """Start the Kubernetes API and the exporters on `host` (port 0: a free port).

    `start_offset`: scenario seconds already elapsed at start (the demo skips the quiet part
    of its scenario); the cluster is built as it stands at that time. `pod_labels`: the
    exporters' pod-label layout (simulator.series.POD_LABEL_LAYOUTS; `none`: the exporter's
    Kubernetes mapping off). `fields`: the DCGM families the exporters serve (None: all;
    observer.fleet.field_presence.SHIPPED_DEFAULT_FIELDS: dcgm-exporter's shipped counters file).
    `exporter_pods`: `gpu-operator` or `chart` (simulator.exporter_pods) makes each node's
    dcgm-exporter pod reachable at its podIP and named port in that install's layout, for
    discovery by pod labels; None: the exporters only at `/nodes/<node>/metrics`."""
    sc = scenario if scenario is not None else demo_scenario()
    layout = build_layout(sc)
    wall0 = wall() - start_offset / speed if speed > 0 else None
    clock = SimClock(sc.start, speed=speed, wall=wall, wall0=wall0)
    cluster = SimCluster(sc, layout, clock=clock, options=options)
    engine = FleetSimulator(sc, layout)
    cluster.repairs.on_repair.append(engine.end_faults)  # a reset or reboot stops the XIDs
    cluster.repairs.on_boot.append(engine.exporter_restarted)  # the XID fields start empty
    k8s = KubeApiServer(cluster, host=host, port=k8s_port, bookmark_interval=bookmark_interval)
    try:
        metrics = MetricsServer(
            LiveMetrics(engine, cluster, pod_labels=pod_labels, fields=fields),
            host=host,
            port=metrics_port,
        )
    except OSError:
        k8s.stop()
        raise
    pods = None
    if exporter_pods is not None:
        pods = ExporterPods(metrics, exporter_pods, host)
        pods.publish(cluster)
    k8s.start()
    metrics.start()
    kubeconfig = k8s.write_kubeconfig(kubeconfig_out) if kubeconfig_out else None
    handle = SimulationHandle(sc, layout, clock, cluster, engine, k8s, metrics, kubeconfig, pods)
    _start_ticker(handle, tick_interval)
    return handle


def _start_ticker(handle: SimulationHandle, tick_interval: float) -> None:
    """Time-driven changes (start-up, workload start/end) happen without requests."""

    def tick() -> None:
        while not handle._stopped.wait(tick_interval):
            handle.cluster.tick()

    handle._ticker = threading.Thread(target=tick, name="sim-ticker", daemon=True)
    handle._ticker.start()


@contextmanager
def stop_on_signal() -> Iterator[threading.Event]:
    """SIGINT/SIGTERM (main thread) set the yielded event instead of raising; the previous
    handlers come back on exit. For callers that do work until told to stop."""
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield done
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def wait_for_signal(handle: SimulationHandle) -> None:
    """Block until SIGINT or SIGTERM (main thread), then stop the simulation."""
    try:
        with stop_on_signal() as done:
            while not done.wait(0.5):
                pass
    finally:
        handle.stop()


def run_server(
    scenario: Scenario,
    *,
    metrics_port: int = 0,
    k8s_port: int = 0,
    kubeconfig_out: str | Path | None = None,
    speed: float = 1.0,
    host: str = "127.0.0.1",
    pod_labels: str = "direct",
) -> int:
    """Serve `scenario` live until SIGINT/SIGTERM; 1 if a port cannot be bound."""
    try:
        handle = start_simulation(
            scenario,
            metrics_port=metrics_port,
            k8s_port=k8s_port,
            kubeconfig_out=kubeconfig_out,
            speed=speed,
            host=host,
            pod_labels=pod_labels,
        )
    except OSError as exc:
        print(
            f"gpufleet: error: cannot listen on {host} (metrics port {metrics_port}, "
            f"Kubernetes port {k8s_port}): {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1
    print(handle.describe(), flush=True)
    print("serving; Ctrl-C to stop", file=sys.stderr, flush=True)
    wait_for_signal(handle)
    return 0
