"""The running service: scheduler, leadership, health server and telemetry around one LiveCycle.

`Service.run(stop)` starts everything, blocks until `stop` is set (SIGTERM/SIGINT), then shuts
down in order: no new runs; the running cycle or job finishes (an actuator back-off is cut
short and the action stays parked in the journal at its step, resumed by the next leader); the
Lease is released only once nothing is in flight; then the HTTP server and clients close.
Only the leader runs cycles and scheduled jobs; a standby serves /healthz, /readyz and /metrics.
Actions run in the remediation cycle's background executor (between cycles, leader only), which
shutdown stops before parking what it left unfinished and releasing the Lease.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from alerts import AlertsRuntime
from gpufleet.live_cycle import CycleReport, LiveCycle
from gpufleet.service.config import ScheduleEntry, ServiceConfig
from gpufleet.service.context import JobContext, JobOutcome
from gpufleet.service.http import HealthServer
from gpufleet.service.job_runs import JobRuns
from gpufleet.service.leader import LeaderElector
from gpufleet.service.schedule import ScheduledJobs
from gpufleet.service.scheduler import ServiceScheduler
from gpufleet.service.telemetry import Telemetry
from metering import MeteringConfig
from remediations.actuator_api import NodeJobs
from remediations.cluster_view import ClusterView
from remediations.cycle import RemediationCycle
from remediations.store import ActionRecord, Store
from remediations.types import ActionState, Verdict

log = logging.getLogger(__name__)

OUTBOX_EVERY = 2.0
"""Seconds between runs of the alerts outbox worker."""


@dataclass
class ServiceParts:
    """Everything `gpufleet run` assembled (gpufleet.commands.run) for the service to drive."""

    cfg: ServiceConfig
    store: Store
    live: LiveCycle
    loop: RemediationCycle
    clock: Callable[[], float]
    """Cycle and journal time (the scenario clock in the embedded demo)."""
    interval: float
    """Wall seconds between cycle starts."""
    identity: str
    telemetry: Telemetry
    elector: LeaderElector | None = None
    diagnostics: NodeJobs | None = None
    metering: MeteringConfig | None = None
    alerts: AlertsRuntime | None = None
    """Slack and Alertmanager (alerts/): fed after each cycle, its outbox sent every ~2 s."""
    on_report: Callable[[CycleReport], None] = lambda r: None
    closers: list[Callable[[], None]] = field(default_factory=list)
    first_cycle_in: float = 0.0
    halt: threading.Event = field(default_factory=threading.Event)
    """Set at shutdown: no new work; the actuator's back-off sleeps end with it."""


class Service:
    def __init__(self, parts: ServiceParts) -> None:
        self.p = parts
        self.cfg = parts.cfg
        self.t = parts.telemetry
        self.halt = parts.halt
        self.ctx = JobContext(
            parts.loop,
            parts.clock,
            parts.diagnostics,
            sleep=self.halt.wait,
            metering=parts.metering,
            gpu_holders=self._gpu_holders,
        )
        self.jobs = ScheduledJobs(
            self.ctx,
            JobRuns(parts.store.engine, parts.store.cluster),
            parts.identity,
            on_outcome=self._job_outcome,
        )
        self.entries = [e for e in self.cfg.schedule if e.enabled]
        grace = self.cfg.cycle_misfire_grace or parts.interval
        self.scheduler = ServiceScheduler(
            interval=parts.interval,
            cycle_grace=grace,
            cycle=self._cycle,
            entries=self.entries,
            fire=self._fire,
            on_skip=self._skipped,
            on_missed=self._scheduler_missed,
        )
        if parts.alerts is not None:
            self.scheduler.add_periodic("alerts-outbox", OUTBOX_EVERY, self._outbox)
        self.http = HealthServer(
            self.cfg.http.host, self.cfg.http.port, self.readiness, self.t.exposition
        )
        self.started = time.time()
        self.last_ok: float | None = None
        self.last_report: CycleReport | None = None
        self._busy = threading.Lock()
        self._inflight = 0
        self._seen_findings: set[tuple[str, str]] = set()
        self.t.leader.set(0)
        # The background executor (if any) acts between cycles only while this process leads
        # and is not stopping, like every other write.
        parts.loop.gate(self.may_act)
        parts.loop.on_acted(self._acted)

    def _gpu_holders(self) -> Mapping[str, str] | None:
        """GPU UUID -> pod from the latest cycle's snapshot (None before the first cycle)."""
        snap = self.p.live.latest
        return None if snap is None else ClusterView.from_snapshot(snap).pod_of_gpu

    def may_act(self) -> bool:
        return not self.halt.is_set() and self.is_leader()

    # ---- leadership --------------------------------------------------------------------------

    def is_leader(self) -> bool:
        return self.p.elector is None or self.p.elector.is_leader()

    def _leadership(self, leading: bool) -> None:
        self.t.leader.set(1 if leading else 0)
        try:
            self.p.store.audit(
                self.p.clock(),
                "leader",
                f"{self.p.identity} {'became leader' if leading else 'stopped leading'}",
                actor=self.p.identity,
                detail={"wall": time.time(), "leading": leading},
            )
        except Exception:
            log.exception("could not journal the leadership change")
        if leading and not self.halt.is_set():
            self.catch_up()

    def catch_up(self) -> None:
        """Missed fires within grace run once now (after a restart or on becoming leader)."""
        for e in self.entries:
            try:
                fire = self.jobs.missed(e)
            except Exception:
                log.exception("could not read the run record of %s", e.name)
                continue
            if fire is not None:
                log.info("schedule %s: running the missed fire at %.0f once now", e.name, fire)
                self.scheduler.run_once_now(e, fire)

    # ---- scheduled work ----------------------------------------------------------------------

    def _enter(self) -> bool:
        with self._busy:
            if self.halt.is_set() or not self.is_leader():
                return False
            self._inflight += 1
            return True

    def _leave(self) -> None:
        with self._busy:
            self._inflight -= 1

    def _cycle(self) -> None:
        if not self._enter():
            return
        try:
            with self.t.span("cycle") as span, self.ctx.lock:
                report = self.p.live.run_once(self.p.clock())
                span.set_attribute("findings", len(report.findings))
                span.set_attribute("ok", report.ok)
            self._record(report)
            self.p.on_report(report)
            if self.p.alerts is not None:
                self.p.alerts.on_cycle(report, report.now)
        except Exception:
            log.exception("cycle failed")
        finally:
            self._leave()

    def _outbox(self) -> None:
        """The alerts outbox worker (leader only, like every write): Slack messages, approvals'
        prompts and Alertmanager output, each stored before it is sent."""
        if self.p.alerts is None or not self._enter():
            return
        try:
            self.p.alerts.run_outbox(self.p.clock())
        except Exception:
            log.exception("alerts outbox failed; its rows stay for the next run")
        finally:
            self._leave()

    def _fire(self, entry: ScheduleEntry, fire: float | None) -> JobOutcome | None:
        if not self._enter():
            return None
        try:
            with self.t.span(f"schedule:{entry.name}", {"kind": entry.kind}):
                return self.jobs.fire(entry, fire)
        finally:
            self._leave()

    def _job_outcome(
        self, entry: ScheduleEntry, fire: float, outcome: JobOutcome | None, result: str
    ) -> None:
        attrs = {"job": entry.name, "kind": entry.kind}
        if result == "missed":
            self.t.job_misses.add(1, attrs)
        else:
            self.t.job_runs.add(1, {**attrs, "outcome": result})
        if outcome is not None:
            log.info("schedule %s (%s): %s", entry.name, entry.kind, outcome.summary)
            for line in outcome.details.get("nodes", []):
                log.info("schedule %s:   %s", entry.name, line)

    def _scheduler_missed(self, entry: ScheduleEntry, fire: float) -> None:
        """Only the leader records a dropped fire: a standby's scheduler drops every fire it
        would not run anyway, and recording it would keep the leader from running it."""
        if self.is_leader() and not self.halt.is_set():
            self.jobs.note_scheduler_miss(entry, fire)

    def _skipped(self, job: str, why: str) -> None:
        self.t.cycle_skips.add(1, {"job": job})

    # ---- telemetry ---------------------------------------------------------------------------

    def _record(self, r: CycleReport) -> None:
        t = self.t
        t.cycle_seconds.record(r.seconds)
        t.cycles.add(1, {"result": "ok" if r.ok else "error"})
        if r.ok:
            self.last_ok = time.time()
            t.last_cycle_ok.set(self.last_ok)
        self.last_report = r
        counts: dict[tuple[str, str], int] = {}
        for f in r.findings:
            k = (f.kind.value, f.severity.value)
            counts[k] = counts.get(k, 0) + 1
        for k in self._seen_findings | counts.keys():
            t.findings.add(counts.get(k, 0), {"kind": k[0], "severity": k[1]})
        self._seen_findings |= counts.keys()
        if r.coverage is not None and r.coverage_changed:
            t.record_coverage(r.coverage.states())
        t.incidents_open.set(r.open_incidents)
        t.awaiting.set(r.awaiting_approval)
        for d in r.decisions:
            t.actions.add(1, {"playbook": d.playbook, "outcome": d.decision.value})
            if d.decision is Verdict.DENY:
                for reason in d.reasons:
                    gate = reason.split(":", 1)[0] if ":" in reason else "other"
                    t.denials.add(1, {"gate": gate})
        self._acted(r.touched)
        try:
            t.breaker.set(1 if self.p.store.engine_state().breaker_tripped else 0)
        except Exception:
            log.exception("reading the breaker failed")

    def _acted(self, touched: Sequence[ActionRecord]) -> None:
        """Actions a cycle or a background executor pass started, resumed or finished."""
        for a in touched:
            self.t.actions.add(1, {"playbook": a.playbook, "outcome": a.state.value})

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        leading = self.is_leader()
        age = None if self.last_ok is None else round(time.time() - self.last_ok, 1)
        stale_after = 3 * self.p.interval + 30.0
        if not leading:
            ready = True
        elif age is None:
            ready = time.time() - self.started < stale_after
        else:
            ready = age < stale_after
        body: dict[str, Any] = {
            "role": "leader" if leading else "standby",
            "identity": self.p.identity,
            "last_successful_cycle_age_seconds": age,
            "ready": ready,
            "stopping": self.halt.is_set(),
        }
        cov = self.p.live.coverage
        if cov is not None:
            body["detector_coverage"] = cov.states()
            body["fields_missing"] = list(cov.fields.missing)
        return ready, body

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Service:
        self.http.start()
        if self.p.elector is not None:
            self.p.elector.on_change = self._leadership
            self.p.elector.start()
        else:
            self._leadership(True)
        self.scheduler.start(self.p.first_cycle_in)
        return self

    def run(self, stop: threading.Event) -> int:
        self.start()
        stop.wait()
        return self.shutdown()

    def _park(self) -> None:
        """Hand this process's unfinished actions back: their journal leases end now, so the
        next leader resumes each at the step it stopped (the pinned intent is journaled)."""
        store = self.p.store
        try:
            for a in store.actions([ActionState.EXECUTING, ActionState.VERIFYING]):
                if a.lease_owner != self.p.identity:
                    continue
                now = self.p.clock()
                store.update_action(
                    a,
                    now,
                    lease_until=now,
                    audit_kind="park",
                    message=f"parked by {self.p.identity} at step {a.progress} (shutdown); "
                    "the next leader resumes it",
                )
        except Exception:
            log.exception("could not park the unfinished actions (their leases will expire)")

    def shutdown(self) -> int:
        """Stop new work, let the running work end (back-offs cut short), release the Lease,
        close. 0 when everything stopped in time."""
        log.info("stopping: no new cycles or jobs")
        self.halt.set()
        done = threading.Event()

        def drain() -> None:
            self.scheduler.shutdown(wait=True)
            done.set()

        threading.Thread(target=drain, name="scheduler-shutdown", daemon=True).start()
        until = time.monotonic() + self.cfg.shutdown_timeout
        clean = done.wait(self.cfg.shutdown_timeout)
        # The background executor's pass ends once the actuator's back-off sees `halt`: the
        # action stays at its journaled step, parked below for the next leader.
        clean = self.p.loop.close(max(0.1, until - time.monotonic())) and clean
        with self._busy:
            inflight = self._inflight
        if clean and inflight == 0:
            self._park()
        if self.p.elector is not None:
            # Release only with nothing in flight: otherwise let the lease expire, so a new
            # leader cannot act while this process may still be writing.
            self.p.elector.stop(release=clean and inflight == 0)
        self.t.leader.set(0)
        self.http.stop()
        for close in reversed(self.p.closers):
            try:
                close()
            except Exception:
                log.exception("closing failed")
        self.t.close()
        if not clean:
            log.error("work still running after %.0fs; exiting anyway", self.cfg.shutdown_timeout)
            return 1
        log.info("stopped cleanly")
        return 0
