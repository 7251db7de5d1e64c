"""One live cycle, collectors to Kubernetes: what `gpufleet demo` runs every scrape interval and
what a long-running `gpufleet run` will run on its scheduler.

    collect() -> FleetSnapshot            (Prometheus or direct scrape, + the Kubernetes API)
    coverage_report(fields)               (when the set of fields changes: logged; detectors
                                           that cannot run give info monitoring_gap findings
                                           every cycle, so none goes silent)
    DetectorSuite.run(snapshot, now)      (detector state carried from cycle to cycle)
    EpisodeTracker.observe(now, found)    (which findings are new episodes, which ended)
    SnapshotViews(snapshot)               (the cluster as this snapshot shows it: nodes, pods,
                                           jobs, who holds which GPU; no second read of the API;
                                           rebuilt only when the cluster changed)
    RemediationCycle.tick(findings, now, view)
                                          (incidents, decisions, journal; the actuator's writes
                                           in the cycle's background executor when it has one,
                                           so a drain waiting on a PDB never delays a cycle)
    Meter.record_cycle(snapshot, now)     (latest fleet state and GPU-hour rollups, if given)
    Store.audit_log(after_id=cursor)      (every journal row the cycle added, for people)

Each stage is isolated and the cycle never raises: a collector error ends that cycle before
detection and remediation (no data is not a healthy fleet, so nothing resolves and nothing acts),
a detector failing is reported by the suite while the others run, a remediation error is caught
and reported. The next cycle runs regardless. The result is plain data (`CycleReport`) for a
printer (gpufleet.demo.log) or a service's logs.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace

from backtesting.episodes import EntityKey, EpisodeTracker
from detectors.coverage import notices
from detectors.findings import Finding, FindingKind, Severity
from detectors.suite import DetectorSuite, SuiteState
from errors import GpufleetError
from errors.outages import OutageLog
from gpufleet.coverage_report import CoverageReport, coverage_report
from metering import Meter
from observer.fleet.field_presence import snapshot_fields
from observer.fleet.model import FleetSnapshot
from observer.kube.collector import KubeCollector
from observer.prometheus.collector import PrometheusCollector
from observer.scrape.collector import ScrapeCollector
from remediations.cluster_view import ClusterView, SnapshotViews
from remediations.cycle import RemediationCycle
from remediations.decisions import ActionDecision
from remediations.incidents import COVERAGE, HOLDS, IncidentChange
from remediations.store import ActionRecord, AuditRecord
from remediations.types import ActionState

log = logging.getLogger(__name__)

SpanFactory = Callable[[str], AbstractContextManager[object]]
"""Opens a named tracing span around a stage (the service's OpenTelemetry tracer); by default
a no-op."""

SnapshotSource = Callable[[], FleetSnapshot]
"""One collection: a FleetSnapshot, or an `errors` TemporaryError/PermanentError (or any
exception) when there is none."""


@dataclass(frozen=True, slots=True)
class CycleError:
    stage: str
    """`collect`, `detect:<detector>`, `detect`, `remediate` or `meter`."""
    message: str


@dataclass(frozen=True, slots=True)
class CycleReport:
    now: float
    gpus: int = 0
    nodes: int = 0
    findings: tuple[Finding, ...] = ()
    started: tuple[Finding, ...] = ()
    """Episodes that began this cycle."""
    escalated: tuple[Finding, ...] = ()
    """Ongoing episodes whose severity rose this cycle."""
    ended: tuple[Finding, ...] = ()
    changes: tuple[IncidentChange, ...] = ()
    decisions: tuple[ActionDecision, ...] = ()
    touched: tuple[ActionRecord, ...] = ()
    audit: tuple[AuditRecord, ...] = ()
    errors: tuple[CycleError, ...] = ()
    seconds: float = 0.0
    open_incidents: int = 0
    awaiting_approval: int = 0
    """Actions waiting for a person after this cycle."""
    coverage: CoverageReport | None = None
    """Field coverage as of this cycle (None when collection failed)."""
    coverage_changed: bool = False
    """The set of fields differs from the previous successful collection (or this is the first)."""

    @property
    def ok(self) -> bool:
        return not self.errors


def scrape_source(scrape: ScrapeCollector, kube: KubeCollector | None = None) -> SnapshotSource:
    """Direct scrape, with nodes, pods and events from the Kubernetes API once it has synced
    (before that, kube-state-metrics pages stand in)."""

    def collect() -> FleetSnapshot:
        if kube is None or not kube.wait_synced(0):
            return kube_health(scrape.collect().snapshot, kube)
        got = scrape.collect(nodes=kube.nodes(), pods=kube.pods(), events=kube.events())
        return kube_health(got.snapshot, kube)

    return collect


def kube_health(snapshot: FleetSnapshot, kube: KubeCollector | None) -> FleetSnapshot:
    """The snapshot, its `degraded_reason` naming the Kubernetes API when the API is failing
    (its nodes, pods and events are then the watch cache's last view)."""
    problem = kube.problem() if kube is not None else ""
    t = snapshot.telemetry
    if not problem or t is None:
        return snapshot
    reason = "; ".join(r for r in (t.degraded_reason, problem) if r)
    return replace(snapshot, telemetry=replace(t, degraded_reason=reason))


def monitoring_gap(
    cause: str, since: float, now: float, *, partial: bool = False, holds: bool = True
) -> Finding:
    """The fleet-level finding of a cycle that collected nothing, or (`partial`) that
    collected but not from every source (an exporter of many, the Kubernetes API, some
    queries). A warning carrying the cause: the fleet, or part of it, is unwatched, which a
    person must hear about; what it feeds is unknown, not bad, and nothing acts on it.
    `holds`: the gap keeps every incident open (no data is not health); False when the rest
    of the fleet is still judged (nodes of a silent exporter have their own node-level gaps)."""
    what = "telemetry source failing" if partial else "no telemetry from the fleet"
    return Finding(
        kind=FindingKind.MONITORING_GAP,
        severity=Severity.WARNING,
        summary=f"{what}: {cause}"[:500],
        first_seen=since,
        last_seen=now,
        evidence={
            "reason": cause,
            "source": "partial" if partial else "collect",
            "outage_seconds": round(now - since, 1),
            HOLDS: holds,
        },
        recommended_action="check the source named here (exporters, Prometheus, the "
        "Kubernetes API) and the network; GPU health is unknown, not bad, and nothing acts "
        "on it meanwhile",
    )


def prometheus_source(
    prom: PrometheusCollector, kube: KubeCollector | None = None
) -> SnapshotSource:
    """One instant cycle of the Prometheus collector at its clock's now (the same cycles as
    `gpufleet detect`), with nodes, pods and events from the Kubernetes API once it has synced
    (before that, kube-state-metrics' series in Prometheus stand in). An unreachable or
    rejecting Prometheus raises: the cycle is a monitoring gap, never an empty fleet."""

    def collect() -> FleetSnapshot:
        if kube is None or not kube.wait_synced(0):
            return kube_health(prom.collect().snapshot, kube)
        got = prom.collect(nodes=kube.nodes(), pods=kube.pods(), events=kube.events())
        return kube_health(got.snapshot, kube)

    return collect


class LiveCycle:
    """Feed `run_once(now)` in time order; it carries detector and episode state between calls."""

    def __init__(
        self,
        collect: SnapshotSource,
        suite: DetectorSuite,
        remediation: RemediationCycle | None = None,
        *,
        meter: Meter | None = None,
        grace_cycles: int = 0,
        audit_after: int | None = 0,
        span: SpanFactory | None = None,
        extra_findings: Callable[[float], Sequence[Finding]] | None = None,
    ) -> None:
        self.collect = collect
        self.extra_findings = extra_findings
        """Findings from outside the detectors (the Alertmanager intake), joined each cycle."""
        self.span: SpanFactory = span or (lambda name: contextlib.nullcontext())
        self.suite = suite
        self.remediation = remediation
        self.meter = meter
        self.state = SuiteState()
        self.episodes = EpisodeTracker(grace_cycles=grace_cycles)
        self.audit_cursor = audit_after
        """Id of the last audit row reported (None: do not follow the journal)."""
        self.cycles = 0
        self.failed_cycles = 0
        self.latest: FleetSnapshot | None = None
        self.views = SnapshotViews()
        """The cluster view of each snapshot, rebuilt only when the cluster changed."""
        """The last snapshot collected (scheduled jobs read who holds which GPU from it)."""
        self.fields: frozenset[str] | None = None
        """The fields of the last successful collection."""
        self.coverage: CoverageReport | None = None
        self.blind_since: float | None = None
        """Cycle time of the first of the current run of cycles that collected nothing."""
        self.partial_since: float | None = None
        """Cycle time of the first of the current run of cycles with a failing source."""
        self.outages = OutageLog(log)
        self.first_look: float | None = None
        """When this process first collected the fleet."""
        self.looked_noted = False

    def observe(self, now: float) -> CycleReport:
        """Collect and detect only (a standby): detector state stays warm, so the process that
        takes over knows which faults began while the fleet was watched; nothing is decided,
        metered or written."""
        return self.run_once(now, act=False)

    def run_once(self, now: float, act: bool = True) -> CycleReport:
        began = time.perf_counter()
        self.cycles += 1
        try:
            with self.span("collect"):
                snapshot = self.collect()
        except GpufleetError as exc:
            return self._blind(now, began, exc.render(), exc, act)
        except Exception as exc:  # isolation: the next cycle must run
            return self._blind(now, began, f"{type(exc).__name__}: {exc}", exc, act)
        if len(snapshot.gpus) == 0:
            return self._blind(now, began, "the source answered with no GPUs", None, act)
        self.outages.recovered("collect")
        if self.blind_since is not None and self._degraded(snapshot):
            self.partial_since = self.blind_since  # one outage, narrowing
        self.blind_since = None
        self.latest = snapshot
        self._note_first_look(now)
        errors: list[CycleError] = []
        changed = self._cover(snapshot)
        try:
            with self.span("detect"):
                result = self.suite.run(snapshot, now, self.state)
        except Exception as exc:
            log.exception("detector suite failed")
            return self._failed(now, began, "detect", f"{type(exc).__name__}: {exc}")
        self.state = result.state
        errors += [CycleError(f"detect:{f.detector}", f.error) for f in result.failures]
        findings = self._with_notices_and_intake(result.findings, now, act, errors)
        findings = self._partial(snapshot, findings, now)
        started, escalated, ended = self._episodes(now, findings)
        changes: tuple[IncidentChange, ...] = ()
        decisions: tuple[ActionDecision, ...] = ()
        touched: tuple[ActionRecord, ...] = ()
        if self.remediation is not None and act:
            changes, decisions, touched = self._remediate(
                self.remediation, snapshot, findings, now, errors
            )
        if self.meter is not None and act:
            try:
                self.meter.record_cycle(snapshot, now, findings)
            except Exception as exc:  # metering must never stop detection or remediation
                self.outages.exception("recording the cycle's metering", exc)
                errors.append(CycleError("meter", f"{type(exc).__name__}: {exc}"))
        open_incidents, awaiting = self._backlog() if act else (0, 0)
        if errors:
            self.failed_cycles += 1
        elif act:  # every stage answered: the store and the rest are back
            self.outages.all_recovered(but=frozenset({"telemetry source"}))
        return CycleReport(
            now=now,
            gpus=len(snapshot.gpus),
            nodes=len(snapshot.nodes),
            findings=findings,
            started=started,
            escalated=escalated,
            ended=ended,
            changes=changes,
            decisions=decisions,
            touched=touched,
            audit=self._new_audit() if act else (),
            errors=tuple(errors),
            seconds=time.perf_counter() - began,
            open_incidents=open_incidents,
            awaiting_approval=awaiting,
            coverage=self.coverage,
            coverage_changed=changed,
        )

    def _with_notices_and_intake(
        self, findings: Sequence[Finding], now: float, act: bool, errors: list[CycleError]
    ) -> tuple[Finding, ...]:
        """The detectors' findings, the coverage notices, and (when acting) what the intake
        received; an intake failure is a cycle error, never a stop."""
        out = tuple(findings)
        if self.coverage is not None:
            out = (*out, *notices(self.coverage.detectors, now))
        if self.extra_findings is not None and act:
            try:
                out = (*out, *self.extra_findings(now))
            except Exception as exc:  # an intake failure must not stop detection
                self.outages.exception("reading findings from the intake", exc)
                errors.append(CycleError("intake", f"{type(exc).__name__}: {exc}"))
        return out

    def _remediate(
        self,
        remediation: RemediationCycle,
        snapshot: FleetSnapshot,
        findings: Sequence[Finding],
        now: float,
        errors: list[CycleError],
    ) -> tuple[tuple[IncidentChange, ...], tuple[ActionDecision, ...], tuple[ActionRecord, ...]]:
        """One remediation tick on the cluster as this cycle's snapshot shows it."""
        try:
            with self.span("remediate"):
                view = self.views(snapshot)
                outcome, acted = remediation.tick(findings, now, view)
        except Exception as exc:
            self.outages.exception("remediation cycle", exc)
            errors.append(CycleError("remediate", f"{type(exc).__name__}: {exc}"))
            return (), (), ()
        return tuple(outcome.changes), tuple(outcome.decisions), tuple(acted)

    @staticmethod
    def _degraded(snapshot: FleetSnapshot) -> str:
        return snapshot.telemetry.degraded_reason if snapshot.telemetry is not None else ""

    def _partial(
        self, snapshot: FleetSnapshot, findings: tuple[Finding, ...], now: float
    ) -> tuple[Finding, ...]:
        """A source failing while others answer is a fleet-level gap carrying its cause (in
        place of the detector's own fleet-wide notice, which has the same entity), logged once
        a minute; nothing when every source answered. Detectors' own coverage notices (a
        detector that cannot run) are other entities and stay."""
        cause = self._degraded(snapshot)
        if not cause:
            self.partial_since = None
            self.outages.recovered("telemetry source")
            return findings
        self.outages.failed("telemetry source", cause)
        if self.partial_since is None:
            self.partial_since = now
        fleet = (FindingKind.MONITORING_GAP.value, None, None, None)
        kept = tuple(f for f in findings if f.entity != fleet or f.detector == COVERAGE)
        silent = len(kept) < len(findings)  # the detector saw most of the fleet silent
        gap = monitoring_gap(cause, self.partial_since, now, partial=True, holds=silent)
        return (*kept, gap)

    def _note_first_look(self, now: float) -> None:
        """Tell the journal when this process first collected the fleet (retried each cycle
        until the store answers): the cold-start rule compares it with the fleet's first watch
        by any replica."""
        if self.first_look is None:
            self.first_look = now
        if self.looked_noted or self.remediation is None:
            return
        try:
            self.remediation.journal.first_look(self.first_look, self.remediation.executor.owner)
            self.looked_noted = True
        except Exception as exc:
            self.outages.exception("noting the first look in the journal", exc)

    def _cover(self, snapshot: FleetSnapshot) -> bool:
        """Recompute and log the coverage report when the set of fields changed."""
        try:
            fields = snapshot_fields(snapshot)
            if fields == self.fields:
                return False
            self.fields = fields
            self.coverage = coverage_report(fields, self.suite.names)
        except Exception:  # coverage is a report; it must never stop a cycle
            log.exception("computing field coverage failed")
            return False
        level = logging.WARNING if self.coverage.blind else logging.INFO
        for line in ["field coverage changed:", *self.coverage.lines()]:
            log.log(level, "%s", line)
        return True

    def _backlog(self) -> tuple[int, int]:
        """Open incidents and actions awaiting approval (0, 0 without remediation)."""
        if self.remediation is None:
            return 0, 0
        journal = self.remediation.journal
        try:
            waiting = journal.store.actions([ActionState.AWAITING_APPROVAL])
        except Exception as exc:
            self.outages.exception("reading the journal", exc)
            waiting = []
        return len(journal.open_incident_ids()), len(waiting)

    def _episodes(
        self, now: float, findings: tuple[Finding, ...]
    ) -> tuple[tuple[Finding, ...], tuple[Finding, ...], tuple[Finding, ...]]:
        before: dict[EntityKey, int] = {
            k: o.finding.severity.rank for k, o in self.episodes.open.items()
        }
        ended = self.episodes.observe(now, findings)
        self.episodes.closed.clear()  # reported here; a live loop must not grow without bound
        started: list[Finding] = []
        escalated: list[Finding] = []
        for key, o in self.episodes.open.items():
            if key not in before:
                started.append(o.finding)
            elif o.finding.severity.rank > before[key]:
                escalated.append(o.finding)
        return tuple(started), tuple(escalated), tuple(ended)

    def _new_audit(self) -> tuple[AuditRecord, ...]:
        if self.remediation is None or self.audit_cursor is None:
            return ()
        try:
            rows = self.remediation.journal.store.audit_log(after_id=self.audit_cursor)
        except Exception as exc:
            self.outages.exception("reading the audit log", exc)
            return ()
        if rows:
            self.audit_cursor = rows[-1].id
        return tuple(rows)

    def _blind(
        self, now: float, began: float, cause: str, exc: BaseException | None, act: bool
    ) -> CycleReport:
        """A cycle that collected nothing: a fleet-level monitoring_gap finding carrying the
        cause goes through incidents (which hold, never resolve, while it lasts) so people
        hear of the outage once, and metering counts the time as unmeasured. Nothing acts on
        GPUs: no data is not a healthy fleet, nor a broken one."""
        self.failed_cycles += 1
        self.outages.failed("collect", cause, exc)
        if self.blind_since is None:
            self.blind_since = now
        gap = monitoring_gap(cause, self.blind_since, now)
        errors = [CycleError("collect", cause)]
        changes: tuple[IncidentChange, ...] = ()
        decisions: tuple[ActionDecision, ...] = ()
        if self.remediation is not None and act:
            try:
                outcome, _ = self.remediation.tick([gap], now, ClusterView.from_findings([gap]))
                changes, decisions = tuple(outcome.changes), tuple(outcome.decisions)
            except Exception as exc2:
                self.outages.exception("remediation cycle", exc2)
                errors.append(CycleError("remediate", f"{type(exc2).__name__}: {exc2}"))
        if self.meter is not None and self.latest is not None and act:
            try:  # the last fleet seen, without a single sample: allocated, unmeasured
                self.meter.record_cycle(replace(self.latest, taken_at=now, metrics={}), now)
            except Exception as exc2:
                self.outages.exception("recording the outage's metering", exc2)
                errors.append(CycleError("meter", f"{type(exc2).__name__}: {exc2}"))
        open_incidents, awaiting = self._backlog() if act else (0, 0)
        return CycleReport(
            now=now,
            findings=(gap,),
            changes=changes,
            decisions=decisions,
            audit=self._new_audit() if act else (),
            errors=tuple(errors),
            seconds=time.perf_counter() - began,
            open_incidents=open_incidents,
            awaiting_approval=awaiting,
        )

    def _failed(self, now: float, began: float, stage: str, message: str) -> CycleReport:
        self.failed_cycles += 1
        return CycleReport(
            now=now,
            audit=self._new_audit(),
            errors=(CycleError(stage, message),),
            seconds=time.perf_counter() - began,
        )
