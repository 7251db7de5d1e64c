"""The composition root: one assembly of the live service from a validated config and policy.

`build` wires collectors (Kubernetes watch cache, the metrics source), the detectors, the
remediation cycle over the one actuator (planning on the view built from the snapshot),
metering, alerts, the diagnostics client and leader election into `ServiceParts`, which
`Service` drives. Production (`gpufleet run`) and the embedded demo (`gpufleet run
--embedded`, gpufleet.demo.embedded) call it alike: there is one wiring of the live cycle.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from alerts import AlertsRuntime
from errors import TemporaryError
from gpufleet.config import GpufleetConfig, detector_suite
from gpufleet.live_cycle import LiveCycle, SnapshotSource
from gpufleet.service.cluster_claim import claim_cluster
from gpufleet.service.leader import LeaderElector
from gpufleet.service.runtime import ServiceParts
from gpufleet.service.sources import CollectorSettings, job_label_keys_of, open_source
from gpufleet.service.telemetry import Telemetry
from gpufleet.service.tracing import traced_suite
from gpufleet.service.write_tracing import traced_writes
from kube.actuator import KubeActuator
from kube.identity import cluster_uid
from kube.jobs import KubeNodeJobs, api_client
from kube.lease import KubeLeaseClient
from metering import Meter
from observer.kube.collector import KubeCollector, KubeSettings
from remediations.cycle import RemediationCycle
from remediations.policy import Policy
from remediations.store import Store

log = logging.getLogger(__name__)
SYNC_TIMEOUT = 10.0
BACKOFF_SLICE = 0.25
"""Wall seconds between looks at leadership during an actuator back-off."""


def identity_of(given: str | None, cfg: GpufleetConfig) -> str:
    """The leader-election identity: `--identity`, the config's, else <hostname>-<pid>."""
    return str(
        given or cfg.service.leader_election.identity or f"{socket.gethostname()}-{os.getpid()}"
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
    collect = _open_collection(scrape, kubeconfig, clock, closers)
    actuator = _actuator(scrape, kubeconfig, clock, _sleeper(halt, leading, speed), closers)
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
    elector = _elector(cfg, kubeconfig, identity, closers)
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


def _open_collection(
    scrape: CollectorSettings,
    kubeconfig: str | None,
    clock: Callable[[], float],
    closers: list[Callable[[], None]],
) -> SnapshotSource:
    """The Kubernetes watch cache (waited for, not required: a slow API must not stop the
    service) and the metrics source over it; their closers join `closers`."""
    kube = KubeCollector(KubeSettings(kubeconfig=kubeconfig)).start()
    closers.append(kube.stop)
    if not kube.wait_synced(SYNC_TIMEOUT):
        log.warning("Kubernetes collector not synced after %.0f s; starting anyway", SYNC_TIMEOUT)
    collect, close_source = open_source(scrape, kube, clock)
    closers.append(close_source)
    return collect


def _actuator(
    scrape: CollectorSettings,
    kubeconfig: str | None,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    closers: list[Callable[[], None]],
) -> KubeActuator:
    """The one actuator; it groups pods into jobs by the collector's job-name label keys, so a
    playbook moves the job the detectors saw (not one by the built-in keys)."""
    actuator = KubeActuator.from_kubeconfig(
        kubeconfig, clock=clock, sleep=sleep, job_label_keys=job_label_keys_of(scrape)
    )
    closers.append(actuator.close)
    return actuator


def _elector(
    cfg: GpufleetConfig, kubeconfig: str | None, identity: str, closers: list[Callable[[], None]]
) -> LeaderElector | None:
    """The Lease-based elector when `service.leader_election.enabled` (None: this replica
    always leads)."""
    le = cfg.service.leader_election
    if not le.enabled:
        return None
    lease = KubeLeaseClient(api_client(kubeconfig), le.namespace, le.lease_name)
    closers.append(lease.close)
    return LeaderElector(
        lease, identity, lease_duration=le.lease_duration, renew_every=le.renew_every
    )


def _claim_cluster(store: Store, kubeconfig: str | None, identity: str) -> None:
    """One journal per cluster: bind the configured name to this cluster's kube-system UID, or
    refuse (ClusterMismatch) when the name belongs to another cluster; before anything starts."""
    api = api_client(kubeconfig)
    try:
        uid, server = cluster_uid(api)
    finally:
        api.close()  # type: ignore[no-untyped-call]
    claim_cluster(store, uid, server, identity, time.time())


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
