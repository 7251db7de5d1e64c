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
from gpufleet.service.context import ServiceJobContext
from gpufleet.service.http import HealthServer
from gpufleet.service.job_runs import JobRuns
from gpufleet.service.leader import LeaderElector
from gpufleet.service.schedule import ScheduledJobs
from gpufleet.service.scheduler import ServiceScheduler
from gpufleet.service.service_config import ScheduleEntry, ServiceConfig
from gpufleet.service.telemetry import Telemetry
from metering import MeteringConfig
from remediations.capabilities import NodeJobs
from remediations.cycle import RemediationCycle, TakeOver
from remediations.incidents import Change, IncidentChange
from remediations.scheduled.context import JobOutcome
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
    cycle: RemediationCycle
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
    leading: threading.Event = field(default_factory=threading.Event)
    """Set while this process leads: the actuator's back-off sleeps end when it is cleared."""


class Service:
    def __init__(self, parts: ServiceParts) -> None:
        self.p = parts
        self.cfg = parts.cfg
        self.t = parts.telemetry
        self.halt = parts.halt
        self.ctx = ServiceJobContext(
            parts.cycle,
            parts.clock,
            parts.diagnostics,
            sleep=self.halt.wait,
            metering=parts.metering,
            gpu_holders=self._gpu_holders,
        )
        self.jobs = ScheduledJobs(
            self.ctx,
            JobRuns.on(parts.store),
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
            self.cfg.http.host,
            self.cfg.http.port,
            self.readiness,
            self.t.exposition,
            on_refused=self.t.refused,
        )
        self.started = time.time()
        self.last_ok: float | None = None
        self.last_observed: float | None = None
        """Wall time of the standby's latest successful collect-and-detect cycle."""
        self.last_report: CycleReport | None = None
        self._busy = threading.Lock()
        self._inflight = 0
        self._seen_findings: set[tuple[str, str]] = set()
        self.outages = parts.live.outages
        """One line per failing dependency per minute (shared with the live cycle)."""
        if parts.cycle.worker is not None:  # and with the executor: one line in total
            parts.cycle.worker.outages = self.outages
        self._warm = False
        """The journal's incidents and claims were read for the current leadership term."""
        self._claims_taken = False
        """The previous leader's claims were ended for the current leadership term."""
        self.t.leader.set(0)
        # The background executor (if any) acts between cycles only while this process leads
        # and is not stopping, like every other write.
        parts.cycle.gate(self.may_act)
        parts.cycle.on_acted(self._acted)

    def _gpu_holders(self) -> Mapping[str, str] | None:
        """GPU UUID -> pod from the latest cycle's snapshot (None before the first cycle)."""
        snap = self.p.live.latest
        return None if snap is None else self.p.live.views(snap).pod_of_gpu

    def may_act(self) -> bool:
        return not self.halt.is_set() and self.is_leader()

    # ---- leadership --------------------------------------------------------------------------

    def is_leader(self) -> bool:
        return self.p.elector is None or self.p.elector.is_leader()

    def _leadership(self, leading: bool) -> None:
        if leading:
            self.p.leading.set()
        else:
            self.p.leading.clear()  # a running drain's back-off ends now; the action waits
            self._warm = self._claims_taken = False
        self.t.leader.set(1 if leading else 0)
        try:
            self.p.store.audit(
                self.p.clock(),
                "leader",
                f"{self.p.identity} {'became leader' if leading else 'stopped leading'}",
                actor=self.p.identity,
                detail={"wall": time.time(), "leading": leading},
            )
        except Exception as exc:
            self.outages.exception("journaling the leadership change", exc)
        if leading and not self.halt.is_set():
            # Not on the election thread: the read waits for a running standby cycle (the
            # cycle lock), and the Lease must be renewed meanwhile.
            threading.Thread(target=self.warm_up, name="leader-warm-up", daemon=True).start()
            self.catch_up()

    def warm_up(self) -> bool:
        """Once per leadership term, before deciding: end the claims the previous leader held
        (its actions resume at once; resuming needs no incident state, so this does not wait
        for the cycle lock), then read what it knew from the journal (open incidents, adopting
        duplicates). Retried before each cycle until it succeeds."""
        if not self._claims_taken and self.is_leader():
            try:
                claims = self.p.cycle.take_over_claims(
                    self.p.clock(), "it no longer holds the leader Lease"
                )
                self._claims_taken = True
                for a in claims:
                    log.warning("took over action %s (%s on %s)", a.id, a.playbook, a.target)
            except Exception as exc:
                self.outages.exception("taking over the previous leader's claims", exc)
        with self.ctx.lock:
            if self._warm or not self.is_leader() or not self._claims_taken:
                return self._warm
            now = self.p.clock()
            try:
                ended = self.p.cycle.journal.reload(now, self.p.identity)
            except Exception as exc:
                self.outages.exception("reading the journal on becoming leader (retried)", exc)
                return False
            self._warm = True
        if self.p.alerts is not None:
            try:  # duplicates' end, and what the previous leader opened but never said
                unsaid = self.p.alerts.unannounced(self.p.store.open_incidents())
                said = [IncidentChange(Change.OPENED, i) for i in unsaid]
                if ended or said:
                    self.p.alerts.on_cycle(TakeOver((*ended, *said), ()), now)
            except Exception as exc:
                self.outages.exception("notifying what the previous leader left unsaid", exc)
        return True

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
        self.cycle_now()

    def cycle_now(self) -> CycleReport | None:
        """One cycle, as the scheduler runs it each interval: the leader collects, detects and
        decides; a standby only observes. The leader's report (None otherwise, or on failure)."""
        if not self._enter():
            if not self.halt.is_set():
                self._observe()
            return None
        if not self.warm_up():
            self._leave()
            return None
        try:
            with self.t.span("cycle") as span, self.ctx.lock:
                report = self.p.live.run_once(self.p.clock())
                span.set_attribute("findings", len(report.findings))
                span.set_attribute("ok", report.ok)
            self._record(report)
            self.p.on_report(report)
            if self.p.alerts is not None:
                self.p.alerts.on_cycle(report, report.now)
            return report
        except Exception as exc:
            self.outages.exception("cycle", exc)
            return None
        finally:
            self._leave()

    def settle(self, timeout: float) -> bool:
        """Wait up to `timeout` s for the background executor's pending pass (True: idle)."""
        return self.p.cycle.settle(timeout)

    def _observe(self) -> None:
        """A standby's cycle: collect and detect without acting, so the detectors' history
        (which faults began while the fleet was watched) is warm when this process leads."""
        try:
            with self.t.span("observe"), self.ctx.lock:
                if self.is_leader():
                    return  # became leader meanwhile: the next cycle decides
                report = self.p.live.observe(self.p.clock())
            if report.ok:
                self.last_observed = time.time()
        except Exception as exc:
            self.outages.exception("standby cycle", exc)

    def _outbox(self) -> None:
        """The alerts outbox worker (leader only, like every write): Slack messages, approvals'
        prompts and Alertmanager output, each stored before it is sent."""
        if self.p.alerts is None or not self._enter():
            return
        try:
            self.p.alerts.run_outbox(self.p.clock())
        except Exception as exc:  # its rows stay for the next run
            self.outages.exception("alerts outbox", exc)
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
        except Exception as exc:
            self.outages.exception("reading the breaker", exc)

    def _acted(self, touched: Sequence[ActionRecord]) -> None:
        """Actions a cycle or a background executor pass started, resumed or finished."""
        for a in touched:
            self.t.actions.add(1, {"playbook": a.playbook, "outcome": a.state.value})

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Ready means this replica is doing its job. A leader: it read the journal for its
        term (warm) and collected within the last 3 intervals + 30 s (its own cycles, or its
        standby cycles just before it took over). A standby: it read the Lease within the last
        3 renew periods, so it knows a leader holds it or is trying to take it over itself.
        A stopping process is not ready."""
        leading = self.is_leader()
        stale_after = 3 * self.p.interval + 30.0
        now = time.time()
        seen = max(self.last_ok or 0.0, self.last_observed or 0.0) or None
        age = None if seen is None else round(now - seen, 1)
        within = age < stale_after if age is not None else now - self.started < stale_after
        el = self.p.elector
        contact = None if el is None else el.contact_age()
        if self.halt.is_set():
            ready, why = False, "stopping"
        elif leading:
            ready = self._warm and within
            why = "leading" if ready else "journal not read yet" if not self._warm else "stale"
        else:
            assert el is not None  # without election this process always leads
            reach = contact is not None and contact < 3 * el.renew_every
            ready = reach
            why = "standby, Lease reachable" if reach else "cannot reach the Lease"
        body: dict[str, Any] = {
            "role": "leader" if leading else "standby",
            "identity": self.p.identity,
            "last_successful_cycle_age_seconds": age,
            "ready": ready,
            "reason": why,
            "stopping": self.halt.is_set(),
        }
        if el is not None:
            body["lease_holder"] = el.holder
            body["lease_contact_age_seconds"] = None if contact is None else round(contact, 1)
        cov = self.p.live.coverage
        if cov is not None:
            body["detector_coverage"] = cov.states()
            body["fields_missing"] = list(cov.fields.missing)
        return ready, body

    # ---- lifecycle ---------------------------------------------------------------------------

    def lead(self) -> Service:
        """Take leadership as a process without election does at start: the HTTP server and
        the scheduler stay off (tests and scripts then run `cycle_now()` on their own clock)."""
        if self.p.elector is not None:
            self.p.elector.on_change = self._leadership
            self.p.elector.start()
        else:
            self._leadership(True)
        return self

    def start(self) -> Service:
        self.http.start()
        self.lead()
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
        clean = self.p.cycle.close(max(0.1, until - time.monotonic())) and clean
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
