"""The pure heart of the engine: (findings, view, memory, journal summary, now) -> decisions.

No database, no clock, no Kubernetes: `decide` is what backtest, eval, the demo and the live
service all run, and what the property tests drive. `remediations.decision_journal` loads its
inputs from
the store and persists its outputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from detectors.findings import INTAKE_DETECTOR, Finding, FindingKind, Severity
from remediations import gates
from remediations.cluster_view import ClusterView
from remediations.gates import Fleet, GateResult, Ledger, LedgerEntry, Outcome
from remediations.incidents import Hysteresis, IncidentChange, Tracked, TrackerState, step
from remediations.playbooks import PLAYBOOKS, NoPlan, Plan, Subject
from remediations.policy import Breaker, Policy, Rule
from remediations.store.records import EngineState
from remediations.types import Actuation, IncidentId, Mode, Verdict, action_id, stable_id


@dataclass(frozen=True, slots=True)
class ActionDecision:
    """One decision about one (incident, playbook): what backtest reports and the store keeps."""

    playbook: str
    target: str
    decided_at: float
    decision: Verdict
    reasons: tuple[str, ...]
    incident_id: IncidentId
    rule: str
    mode: Mode
    shadow: bool = False
    """Decided under `actuation: shadow`: journaled as what would be done, never executed."""
    plan: Plan | None = None
    attempt: int = 1
    escalate: bool = False
    """Automation has reached its limit here: a person must look."""
    merged_into: str | None = None
    """The pending action (same playbook and target, another incident) this one joined: no new
    action is journaled, the verdict is DENY and the reasons say which action it joined."""

    @property
    def idempotency_key(self) -> str:
        return f"{self.incident_id}:{self.playbook}:{self.attempt}"

    def to_json(self) -> dict[str, Any]:
        """The `actions` entry of `gpufleet backtest` (issue 4's contract)."""
        return {
            "playbook": self.playbook,
            "target": self.target,
            "decided_at": self.decided_at,
            "decision": self.decision.value,
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True, slots=True)
class Memory:
    """What the engine carries between cycles besides the journal (compact, rebuildable)."""

    tracker: TrackerState
    fault_seen: Mapping[str, float] = field(default_factory=dict)
    """GPU node -> last time it had a warning/critical fault (the breaker's window)."""
    reported: Mapping[tuple[str, str], str] = field(default_factory=dict)
    """(incident, playbook) -> signature of the last reported deny, to report changes only."""
    intake_seen: Mapping[str, float] = field(default_factory=dict)
    """GPU node -> last time an alert-derived finding said it had a fault (their own breaker)."""
    watched_before: bool = False
    """The fleet was watched by some replica (as the journal records) before this process
    first looked at it: a detector's "already there at my first look" then means "began while
    the fleet was watched", not cold-start evidence."""
    first_watched: float | None = None
    """When some replica first watched the fleet (the journal's first `watch` row); None until
    this process has read it."""


@dataclass(frozen=True, slots=True)
class JournalSummary:
    """What the journal says, as `decide` needs it."""

    ledger: Ledger = field(default_factory=Ledger)
    blocked: frozenset[tuple[str, str]] = frozenset()
    """(incident, playbook) with an action in flight, done (non-repeatable) or rejected."""
    attempts: Mapping[tuple[str, str], int] = field(default_factory=dict)
    """(incident, playbook) -> actions journaled so far (the next key's attempt number)."""
    pending: Mapping[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    """(playbook, target) -> (action id, incident id) of the action not yet finished there."""
    settled: Mapping[tuple[str, str], float] = field(default_factory=dict)
    """(playbook, target) -> when the latest action there that settles it for every incident
    open at the time (done and non-repeatable, or rejected by a person) was decided."""
    cluster: str = ""
    """The journal's cluster (action ids of this cycle's decisions are derived from it)."""
    verdicts: Mapping[str, float] = field(default_factory=dict)
    """GPU UUID -> time of the latest passed or waived diagnostic on it or its node, for the
    GPUs of this cycle's held findings (remediations.incidents.answered)."""


@dataclass(frozen=True, slots=True)
class CycleResult:
    memory: Memory
    changes: list[IncidentChange]
    decisions: list[ActionDecision]
    trip: str | None = None
    """Reason the breaker must trip now (the caller persists it), or None."""
    attached: frozenset[tuple[str, str]] = frozenset()
    """(playbook, target) of pending actions that an open incident other than their own joined
    this cycle: resolving the action's own incident must not expire them."""


REPEATABLE = frozenset({"restart_pod", "restart_job", "migrate", "request_reset", "request_reboot"})
HARDWARE_FAULTS = frozenset(
    {
        FindingKind.GPU_XID,
        FindingKind.GPU_MEMORY,
        FindingKind.GPU_LOST,
        FindingKind.GPU_INTERCONNECT,
    }
)
"""The kinds the circuit breaker counts: hardware faults. Idle GPUs, throttling, stragglers,
hangs, anomalies and monitoring gaps say nothing about a fleet-wide hardware event (a fleet of
long-idle notebooks must not stop all remediation)."""


def matches(rule: Rule, t: Tracked, view: ClusterView, pool_label: str) -> bool:
    m = rule.match
    if m.kinds and t.kind not in m.kinds:
        return False
    if m.severities and t.severity not in m.severities:
        return False
    if m.node_pools or m.node_labels:
        node = view.nodes.get(t.node or "")
        if node is None:
            return False
        if m.node_pools and node.labels.get(pool_label) not in m.node_pools:
            return False
        if any(node.labels.get(k) != v for k, v in m.node_labels.items()):
            return False
    if m.namespaces:
        ns = t.job.split("/", 1)[0] if t.job else None
        if ns is None and t.gpu_uuid is not None and t.gpu_uuid in view.pod_of_gpu:
            ns = view.pod_of_gpu[t.gpu_uuid].split("/", 1)[0]
        if ns is None or not any(fnmatchcase(ns, p) for p in m.namespaces):
            return False
    return True


def _subject_target(t: Tracked) -> str:
    if t.job is not None and t.node is None:
        return f"job/{t.job}"
    if t.node is not None:
        return f"node/{t.node}"
    return "fleet"


def from_intake(t: Tracked) -> bool:
    """Whether the incident was made from alerts delivered to gpufleet (not its detectors)."""
    return t.evidence.get("source") == INTAKE_DETECTOR


def _breaker(
    br: Breaker,
    findings: Sequence[Finding],
    fleet: Fleet,
    remembered: Mapping[str, float],
    now: float,
    complete: bool = True,
) -> tuple[dict[str, float], str | None]:
    """Nodes with hardware faults within the window, and why to trip (or None). Called once
    for the detectors' findings and once, on their own budget, for alert-derived ones."""
    seen = {n: t for n, t in remembered.items() if now - t <= br.window}
    for f in findings:
        faulty = f.kind in HARDWARE_FAULTS and f.severity is not Severity.INFO
        faulty = faulty and not f.pre_existing  # cold-start evidence never acts, nor trips
        if faulty and f.node in fleet.gpu_nodes and now - f.last_seen <= br.window:
            seen[f.node] = max(seen.get(f.node, f.last_seen), f.last_seen)
    total = len(fleet.gpu_nodes) if complete else 0
    if total and len(seen) >= br.min_nodes and 100.0 * len(seen) / total > br.threshold_percent:
        return seen, (
            f"{len(seen)}/{total} GPU nodes ({100.0 * len(seen) / total:.0f}%) had faults within "
            f"{br.window:.0f}s (threshold {br.threshold_percent:g}%)"
        )
    return seen, None


SHADOW_EXECUTE = "shadow: would execute; nothing is written to Kubernetes (actuation: shadow)"
SHADOW_APPROVAL = "shadow: would ask a person to approve; nothing is written (actuation: shadow)"


COLD_START = (
    "cold start: the evidence was present before gpufleet started watching; automatic "
    "actions need evidence seen while watching, so a person must approve"
)


def _verdict(
    rule: Rule, plan: Plan, results: list[GateResult], shadow: bool, cold: bool = False
) -> tuple[Verdict, tuple[str, ...], bool]:
    failed = [r for r in results if not r.ok]
    if failed:
        escalate = any(r.outcome is Outcome.ESCALATE for r in failed)
        return Verdict.DENY, tuple(f"{r.gate}: {r.reason}" for r in failed), escalate
    why = f"rule {rule.name}: {rule.mode.value}"
    if rule.mode is Mode.APPROVAL or cold:
        extra = ((COLD_START,) if rule.mode is Mode.AUTO else ()) + (
            (SHADOW_APPROVAL,) if shadow else ()
        )
        return Verdict.AWAIT_APPROVAL, (why, "gates passed; a person must approve", *extra), False
    extra = (SHADOW_EXECUTE,) if shadow else ()
    return Verdict.EXECUTE, (why, "all gates passed", *extra), False


def decide(
    policy: Policy,
    findings: Sequence[Finding],
    view: ClusterView,
    now: float,
    memory: Memory,
    state: EngineState,
    journal: JournalSummary,
    *,
    shadow: bool = False,
    not_before: float | None = None,
) -> CycleResult:
    """One engine cycle, purely, in three steps: evidence (incidents with hysteresis, the
    breaker), a decision per (open incident, matching rule), and the output for the journal.
    `not_before`: findings last seen earlier never act (the engine's start time or the last
    breaker reset: stale replays, NVSentinel #1280/#450). `shadow`: every rule in shadow
    whatever its `actuation` (backtests, a forced shadow)."""
    evidence = _gather_evidence(
        policy, findings, view, now, memory, state, not_before, journal.verdicts
    )
    cycle = _CycleDecisions(policy, view, now, evidence, journal, memory.reported, shadow)
    for t in evidence.tracker.open():
        for ri in cycle.rules_for(t):
            cycle.decide_one(t, ri)
    return cycle.result()


@dataclass(frozen=True, slots=True)
class _Evidence:
    """What this cycle's findings say, before any rule is read."""

    tracker: TrackerState
    changes: list[IncidentChange]
    fleet: Fleet
    fault_seen: dict[str, float]
    trip: str | None
    state: EngineState
    """The engine state as the decisions see it (tripped now if `trip`)."""
    not_before: float | None
    intake_seen: dict[str, float]
    intake_trip: str | None
    """Alert-derived faults over the intake's breaker: no action on alert-derived incidents
    while the window holds them (the detectors' actions go on)."""
    watched_before: bool = False
    first_watched: float | None = None


def _gather_evidence(
    policy: Policy,
    findings: Sequence[Finding],
    view: ClusterView,
    now: float,
    memory: Memory,
    state: EngineState,
    not_before: float | None,
    verdicts: Mapping[str, float],
) -> _Evidence:
    """Incidents (hysteresis), the fleet index, the breaker; a breaker reset moves
    `not_before` up to it (findings from before a reset never act)."""
    h = Hysteresis(policy.hysteresis.open_after, policy.hysteresis.resolve_after)
    tracker, changes = step(
        memory.tracker,
        findings,
        now,
        h,
        verdicts,
        watched_before=memory.watched_before,
        first_watched=memory.first_watched,
    )
    fleet = Fleet.of(view, policy.gates.pool_label)
    ours = [f for f in findings if not f.from_intake]
    alerted = [f for f in findings if f.from_intake]
    fault_seen, trip = _breaker(
        policy.gates.breaker, ours, fleet, memory.fault_seen, now, view.complete
    )
    intake_seen, intake_trip = _breaker(
        policy.intake.breaker, alerted, fleet, memory.intake_seen, now, view.complete
    )
    if trip is not None:
        state = EngineState(
            state.cluster, state.paused, state.paused_by, state.paused_reason, True, now, trip
        )
    if state.breaker_reset_at is not None:
        not_before = max(not_before or state.breaker_reset_at, state.breaker_reset_at)
    return _Evidence(
        tracker,
        changes,
        fleet,
        fault_seen,
        trip,
        state,
        not_before,
        intake_seen,
        intake_trip,
        memory.watched_before,
        memory.first_watched,
    )


_Outcome = tuple[Verdict, tuple[str, ...], bool, Plan | None, str | None]
"""verdict, reasons, escalate, plan, merged-into action id."""


class _CycleDecisions:
    """The decisions of one cycle, built one (incident, rule) at a time; carries what earlier
    decisions of the same cycle change for later ones (ledger, new actions, merges)."""

    def __init__(
        self,
        policy: Policy,
        view: ClusterView,
        now: float,
        evidence: _Evidence,
        journal: JournalSummary,
        reported: Mapping[tuple[str, str], str],
        shadow: bool,
    ) -> None:
        self.policy = policy
        self.view = view
        self.now = now
        self.evidence = evidence
        self.journal = journal
        self.shadow = shadow
        self.ledger = journal.ledger
        self.reported = dict(reported)
        self.fresh: dict[tuple[str, str], tuple[str, str]] = {}
        """(playbook, target) -> (action id, incident id) of this cycle's new actions."""
        self.attached: set[tuple[str, str]] = set()
        self.decisions: list[ActionDecision] = []
        self.params = [PLAYBOOKS[r.playbook].params(r.params) for r in policy.rules]
        self.by_kind: dict[str, list[int]] = {}
        for i, r in enumerate(policy.rules):
            for k in r.match.kinds or list(FindingKind):
                self.by_kind.setdefault(k.value, []).append(i)

    # ---- which rules -------------------------------------------------------------------------

    def rules_for(self, t: Tracked) -> list[int]:
        """Indices of the rules that match this incident and have nothing journaled for it."""
        assert t.incident_id is not None
        out = []
        for ri in self.by_kind.get(t.kind, ()):
            rule = self.policy.rules[ri]
            if not matches(rule, t, self.view, self.policy.gates.pool_label):
                continue
            if (t.incident_id, rule.playbook) in self.journal.blocked:
                continue
            out.append(ri)
        return out

    # ---- one decision ------------------------------------------------------------------------

    def decide_one(self, t: Tracked, ri: int) -> None:
        rule = self.policy.rules[ri]
        in_shadow = self.shadow or self.policy.actuation_of(rule) is Actuation.SHADOW
        if rule.mode is Mode.NOTIFY:
            self._notify(t, rule, in_shadow)
            return
        outcome = self._plan_and_gate(t, rule, ri, in_shadow)
        if outcome is not None:
            self._record(t, rule, in_shadow, outcome)

    def _notify(self, t: Tracked, rule: Rule, in_shadow: bool) -> None:
        """A notify rule reports only (no plan, no gates), once per incident and rule."""
        assert t.incident_id is not None
        key = (t.incident_id, rule.playbook)
        reasons = (f"rule {rule.name}: notify only",)
        if self.reported.get(key) == reasons[0]:
            return
        self.reported[key] = reasons[0]
        self.decisions.append(
            ActionDecision(
                rule.playbook,
                _subject_target(t),
                self.now,
                Verdict.DENY,
                reasons,
                t.incident_id,
                rule.name,
                rule.mode,
                in_shadow,
            )
        )

    def _plan_and_gate(self, t: Tracked, rule: Rule, ri: int, in_shadow: bool) -> _Outcome | None:
        """The playbook's plan and the gates' verdict on it; None when there is nothing to
        decide (the plan is this incident's own pending action, or one that settled it)."""
        assert t.incident_id is not None
        subject = Subject(
            t.incident_id, t.kind, t.severity, t.summary, t.node, t.gpu_uuid, t.job, t.evidence
        )
        planned = PLAYBOOKS[rule.playbook].plan(subject, self.view, self.params[ri])
        if isinstance(planned, NoPlan):
            return Verdict.DENY, (f"plan: {planned.reason}",), False, None, None
        pt = (planned.playbook, planned.target)
        joined = self.journal.pending.get(pt) or self.fresh.get(pt)
        if joined is not None:
            aid, owner = joined
            if owner == t.incident_id:
                return None
            self.attached.add(pt)
            merged = (
                f"merged: {planned.playbook} on {planned.target} already pending as "
                f"action {aid} for incident {owner}",
            )
            return Verdict.DENY, merged, False, planned, aid
        if self.journal.settled.get(pt, -1.0) >= t.opened_at:
            return None  # settled while this incident was open: that action covered it too
        verdict, reasons, esc = _verdict(
            rule, planned, self._gates(t, rule, planned), in_shadow, t.pre_existing
        )
        return verdict, reasons, esc, planned, None

    def _gates(self, t: Tracked, rule: Rule, plan: Plan) -> list[GateResult]:
        """The static gates always; the execution gates when it would run now unasked (an
        automatic rule on evidence seen while watching)."""
        g, ev = self.policy.gates, self.evidence
        results = gates.static_gates(
            g, plan, self.view, t.kind, self.ledger, self.now, t.last_seen, ev.not_before
        )
        if from_intake(t) and ev.intake_trip is not None:
            results.append(
                GateResult(
                    "intake_breaker",
                    Outcome.DENY,
                    f"alert-derived faults: {ev.intake_trip}; no action on alerts until the "
                    "window clears",
                )
            )
        if rule.mode is Mode.AUTO and not t.pre_existing:
            radius = self.policy.intake.blast_radius if from_intake(t) else None
            results += gates.execution_gates(
                g, plan, ev.fleet, ev.state, self.ledger, self.now, radius
            )
        return results

    # ---- output ------------------------------------------------------------------------------

    def _record(self, t: Tracked, rule: Rule, in_shadow: bool, outcome: _Outcome) -> None:
        """Append the decision (a deny only when its reasons changed since last reported), and
        carry a new action into the rest of the cycle (pending for merges, the ledger)."""
        assert t.incident_id is not None
        verdict, reasons, esc, plan, merged = outcome
        key = (t.incident_id, rule.playbook)
        if verdict is Verdict.DENY:
            sig = stable_id(*reasons)
            if self.reported.get(key) == sig:
                return
            self.reported[key] = sig
        else:
            self.reported.pop(key, None)
        d = ActionDecision(
            playbook=rule.playbook,
            target=plan.target if plan is not None else f"incident/{t.incident_id}",
            decided_at=self.now,
            decision=verdict,
            reasons=reasons,
            incident_id=t.incident_id,
            rule=rule.name,
            mode=rule.mode,
            shadow=in_shadow,
            plan=plan,
            attempt=self.journal.attempts.get(key, 0) + 1,
            escalate=esc,
            merged_into=merged,
        )
        self.decisions.append(d)
        if plan is None or verdict is Verdict.DENY:
            return
        self.fresh[(plan.playbook, plan.target)] = (
            action_id(self.journal.cluster, d.idempotency_key),
            t.incident_id,
        )
        if verdict is Verdict.EXECUTE:
            self.ledger = self.ledger.add(
                LedgerEntry(
                    plan.playbook,
                    plan.target,
                    self.now,
                    plan.target_nodes,
                    plan.disruptive,
                    from_intake=from_intake(t),
                )
            )

    def result(self) -> CycleResult:
        evidence = self.evidence
        live = {t.incident_id for t in evidence.tracker.open()}
        reported = {k: v for k, v in self.reported.items() if k[0] in live}
        return CycleResult(
            Memory(
                evidence.tracker,
                evidence.fault_seen,
                reported,
                evidence.intake_seen,
                evidence.watched_before,
                evidence.first_watched,
            ),
            evidence.changes,
            self.decisions,
            evidence.trip,
            frozenset(self.attached),
        )
