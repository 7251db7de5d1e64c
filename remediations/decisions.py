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

from detectors.findings import Finding, FindingKind, Severity
from remediations import gates
from remediations.cluster_view import ClusterView
from remediations.gates import Fleet, GateResult, Ledger, LedgerEntry, Outcome
from remediations.incidents import Hysteresis, IncidentChange, Tracked, TrackerState, step
from remediations.playbooks import PLAYBOOKS, NoPlan, Plan, Subject
from remediations.policy import Policy, Rule
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


def _breaker(
    policy: Policy,
    findings: Sequence[Finding],
    fleet: Fleet,
    memory: Memory,
    now: float,
    complete: bool = True,
) -> tuple[dict[str, float], str | None]:
    br = policy.gates.breaker
    seen = {n: t for n, t in memory.fault_seen.items() if now - t <= br.window}
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


def _pending(
    journal: Mapping[tuple[str, str], tuple[str, str]],
    fresh: Mapping[tuple[str, str], tuple[str, str]],
    plan: Plan,
) -> tuple[str, str] | None:
    """(action id, incident id) of the unfinished action for the plan's (playbook, target):
    journaled earlier or decided earlier in this cycle; None when there is none."""
    pt = (plan.playbook, plan.target)
    return journal.get(pt) or fresh.get(pt)


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
    """One engine cycle, purely. `not_before`: findings last seen earlier never act (the
    engine's start time or the last breaker reset: stale replays, NVSentinel #1280/#450).
    `shadow`: every rule in shadow whatever its `actuation` (backtests, a forced shadow)."""
    g = policy.gates
    h = Hysteresis(policy.hysteresis.open_after, policy.hysteresis.resolve_after)
    tracker, changes = step(memory.tracker, findings, now, h)
    fleet = Fleet.of(view, g.pool_label)
    fault_seen, trip = _breaker(policy, findings, fleet, memory, now, view.complete)
    if trip is not None:
        state = EngineState(
            state.cluster, state.paused, state.paused_by, state.paused_reason, True, now, trip
        )
    if state.breaker_reset_at is not None:
        not_before = max(not_before or state.breaker_reset_at, state.breaker_reset_at)

    ledger = journal.ledger
    reported = dict(memory.reported)
    fresh: dict[tuple[str, str], tuple[str, str]] = {}
    """(playbook, target) -> (action id, incident id) of this cycle's new actions."""
    attached: set[tuple[str, str]] = set()
    decisions: list[ActionDecision] = []
    params = [PLAYBOOKS[r.playbook].params(r.params) for r in policy.rules]
    by_kind: dict[str, list[int]] = {}
    for i, r in enumerate(policy.rules):
        for k in r.match.kinds or list(FindingKind):
            by_kind.setdefault(k.value, []).append(i)
    for t in tracker.open():
        assert t.incident_id is not None
        for ri in by_kind.get(t.kind, ()):
            rule = policy.rules[ri]
            if not matches(rule, t, view, g.pool_label):
                continue
            in_shadow = shadow or policy.actuation_of(rule) is Actuation.SHADOW
            key = (t.incident_id, rule.playbook)
            if key in journal.blocked:
                continue
            plan: Plan | None
            reasons: tuple[str, ...]
            if rule.mode is Mode.NOTIFY:  # report only: no plan, no gates
                reasons = (f"rule {rule.name}: notify only",)
                if reported.get(key) != reasons[0]:
                    reported[key] = reasons[0]
                    decisions.append(
                        ActionDecision(
                            rule.playbook,
                            _subject_target(t),
                            now,
                            Verdict.DENY,
                            reasons,
                            t.incident_id,
                            rule.name,
                            rule.mode,
                            in_shadow,
                        )
                    )
                continue
            subject = Subject(
                t.incident_id, t.kind, t.severity, t.summary, t.node, t.gpu_uuid, t.job
            )
            planned = PLAYBOOKS[rule.playbook].plan(subject, view, params[ri])
            merged: str | None = None
            if isinstance(planned, NoPlan):
                verdict, reasons, esc, plan = (
                    Verdict.DENY,
                    (f"plan: {planned.reason}",),
                    False,
                    None,
                )
            elif (joined := _pending(journal.pending, fresh, planned)) is not None:
                aid, owner = joined
                if owner == t.incident_id:
                    continue
                attached.add((planned.playbook, planned.target))
                verdict, esc, plan, merged = Verdict.DENY, False, planned, aid
                reasons = (
                    f"merged: {planned.playbook} on {planned.target} already pending as "
                    f"action {aid} for incident {owner}",
                )
            elif journal.settled.get((planned.playbook, planned.target), -1.0) >= t.opened_at:
                continue  # settled while this incident was open: that action covered it too
            else:
                plan = planned
                results = gates.static_gates(
                    g, plan, view, t.kind, ledger, now, t.last_seen, not_before
                )
                if rule.mode is Mode.AUTO and not t.pre_existing:
                    results += gates.execution_gates(g, plan, fleet, state, ledger, now)
                verdict, reasons, esc = _verdict(rule, plan, results, in_shadow, t.pre_existing)
            target = plan.target if plan is not None else f"incident/{t.incident_id}"
            if verdict is Verdict.DENY:
                sig = stable_id(*reasons)
                if reported.get(key) == sig:
                    continue
                reported[key] = sig
            else:
                reported.pop(key, None)
            decisions.append(
                ActionDecision(
                    playbook=rule.playbook,
                    target=target,
                    decided_at=now,
                    decision=verdict,
                    reasons=reasons,
                    incident_id=t.incident_id,
                    rule=rule.name,
                    mode=rule.mode,
                    shadow=in_shadow,
                    plan=plan,
                    attempt=journal.attempts.get(key, 0) + 1,
                    escalate=esc,
                    merged_into=merged,
                )
            )
            if verdict is not Verdict.DENY and plan is not None:
                d = decisions[-1]
                fresh[(plan.playbook, plan.target)] = (
                    action_id(journal.cluster, d.idempotency_key),
                    t.incident_id,
                )
            if verdict is Verdict.EXECUTE and plan is not None:
                ledger = ledger.add(
                    LedgerEntry(plan.playbook, plan.target, now, plan.target_nodes, plan.disruptive)
                )
    live = {t.incident_id for t in tracker.open()}
    reported = {k: v for k, v in reported.items() if k[0] in live}
    return CycleResult(
        Memory(tracker, fault_seen, reported), changes, decisions, trip, frozenset(attached)
    )
