"""The decision journal: decide on each cycle's findings and journal the outcome.

`DecisionJournal.cycle(findings, view, now)` loads what `decide` needs from the store, runs it,
and journals incidents, decisions and the breaker, each before anything can act on it. Execution
is the executor's job (`remediations.executor`); approvals come from people through `approve` and
`reject`. `ShadowReplay` is the same journal on an in-memory journal, for backtests.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from detectors.findings import Finding
from remediations.cluster_view import ClusterView
from remediations.decisions import (
    REPEATABLE,
    ActionDecision,
    CycleResult,
    JournalSummary,
    Memory,
    decide,
)
from remediations.escalation import escalation
from remediations.gates import Ledger, LedgerEntry
from remediations.incidents import HELD_EVIDENCE, Change, IncidentChange, Tracked, TrackerState
from remediations.playbooks import Plan
from remediations.policy import Policy, load_policy
from remediations.staleness import stale_reason
from remediations.store import ActionRecord, NewAction, Store
from remediations.store.records import ActionBrief, AuditRecord, EngineState, IncidentRecord
from remediations.types import ActionState, Actuation, IncidentStatus, Intent, Mode, Verdict
from remediations.validation import latest_diagnosis, scope

COUNTED = frozenset(
    {
        ActionState.APPROVED,
        ActionState.EXECUTING,
        ActionState.VERIFYING,
        ActionState.DONE,
        ActionState.FAILED,
        ActionState.ROLLED_BACK,
    }
)
"""States that count as an attempt (rate, cooldown, max attempts)."""
HOLDING = frozenset({ActionState.EXECUTING, ActionState.VERIFYING})
"""States whose disruptive actions hold their nodes (besides what the cluster view shows)."""


def _would_ask(a: ActionBrief | ActionRecord, now: float | None) -> bool:
    """A shadow action whose live twin would still be awaiting approval at `now` (its deadline
    not passed, its incident not resolved: resolution moves the deadline to then)."""
    return (
        a.state is ActionState.SHADOW
        and a.decision is Verdict.AWAIT_APPROVAL
        and (now is None or a.deadline is None or now < a.deadline)
    )


def summarize(
    actions: Iterable[ActionBrief],
    open_incidents: set[str],
    exclude: str | None = None,
    cluster: str = "",
    now: float | None = None,
) -> JournalSummary:
    """The journal as `decide` and the executor's gates need it.

    A shadow action counts as its live twin would: one that would have executed as done (rate,
    cooldown, attempts, and its nodes held while its incident is open, so the shadow journal
    shows what the blast radius would have allowed); one that would have asked a person as
    awaiting approval until its deadline (`now`; its incident's end moves the deadline)."""
    entries: list[LedgerEntry] = []
    blocked: set[tuple[str, str]] = set()
    attempts: dict[tuple[str, str], int] = {}
    pending: dict[tuple[str, str], tuple[str, str]] = {}
    settled: dict[tuple[str, str], float] = {}
    for a in actions:
        key = (str(a.incident_id), a.playbook)
        attempts[key] = max(attempts.get(key, 0), a.attempt)
        if a.id == exclude:
            continue
        shadow = a.state is ActionState.SHADOW
        would_run = shadow and a.decision is Verdict.EXECUTE
        would_ask = shadow and _would_ask(a, now)
        legacy_dry = a.shadow and a.state is ActionState.DONE
        done = a.state is ActionState.DONE or would_run
        done_once = done and a.playbook not in REPEATABLE
        if not a.state.terminal or a.state is ActionState.REJECTED or done_once or would_ask:
            blocked.add(key)
        if not a.state.terminal or would_ask:
            pending[(a.playbook, a.target)] = (str(a.id), str(a.incident_id))
        elif done_once or a.state is ActionState.REJECTED:
            pt = (a.playbook, a.target)
            settled[pt] = max(settled.get(pt, a.created_at), a.created_at)
        if a.state in COUNTED or would_run:
            holds = a.state in HOLDING or (
                (legacy_dry or would_run) and a.incident_id in open_incidents
            )
            entries.append(
                LedgerEntry(
                    a.playbook,
                    a.target,
                    a.at,
                    a.target_nodes,
                    a.disruptive,
                    holds,
                    a.from_intake,
                    a.settled_at,
                )
            )
    return JournalSummary(
        Ledger.of(entries), frozenset(blocked), attempts, pending, settled, cluster
    )


def shadow_result(d: ActionDecision) -> str:
    """What a shadow action would have done, as `gpufleet actions list` and the audit show it."""
    if d.decision is Verdict.AWAIT_APPROVAL:
        return (
            f"shadow: would ask a person to approve {d.playbook} on {d.target}; "
            "nothing written to Kubernetes"
        )
    steps = ", ".join(_step(i) for i in (d.plan.intents if d.plan else ()))
    return (
        f"shadow: would {d.playbook} {d.target}"
        + (f" ({steps})" if steps else "")
        + "; nothing written to Kubernetes"
    )[:1000]


def denial_message(d: ActionDecision) -> str:
    """The audit line of a decision that journals no action. A notify-only rule refused
    nothing: it reads as what it is, not as "cordon ... deny" (a person thinks a cordon was
    wanted and blocked)."""
    if d.mode is Mode.NOTIFY:
        return f"{d.target}: rule {d.rule} only notifies; no action taken"
    return f"{d.playbook} on {d.target}: deny"


def _step(i: Intent) -> str:
    """One intent as the shadow result names it; a partial drain also says what it keeps."""
    kept = i.args.get("gpus_in_service")
    if kept is None:
        return f"{i.op} {i.target}"
    only = ", ".join(i.args.get("only") or ())
    return f"{i.op} {i.target} [only {only}; {len(kept)} other GPUs stay in service]"


WATCH = "watch"
"""Audit kind of the row that records when the fleet was first watched by any replica."""
WATCH_TARGET = "fleet"


class DecisionJournal:
    """Loads what `decide` needs from the store, runs it, and journals incidents, decisions
    (live: awaiting approval or approved; shadow: what would be done) and the breaker before
    anything can act; takes people's approvals and rejections; expires what waited too long.
    The `Executor` carries out what it journaled."""

    def __init__(
        self,
        policy: Policy,
        store: Store,
        *,
        started_at: float,
        shadow: bool = False,
    ) -> None:
        self.policy = policy
        self.store = store
        self.force_shadow = shadow
        """Every rule in shadow whatever the policy says (backtests, `shadow: true` in the
        gpufleet config)."""
        self.started_at = started_at
        """Findings last seen before this never act (a restart must not replay, #1280)."""
        self.memory = Memory(TrackerState.from_records(store.cluster, store.open_incidents()))
        self.loaded_at: float | None = None
        """When `reload` last read the journal (None: only at construction)."""
        self.attached: frozenset[tuple[str, str]] = frozenset()
        """(playbook, target) of pending actions that another open incident joined last cycle."""
        self._kept: set[str] = set()
        """Pending actions whose own incident resolved while another open incident needs them."""
        self._rule_params = {r.name: r.params for r in policy.rules}

    def reload(self, now: float, actor: str) -> list[IncidentChange]:
        """Read the open incidents from the journal again, as a process that just became leader
        must: another leader may have opened, updated or resolved incidents since this one
        started. An entity with several open incidents (left by earlier failovers that did not
        reload) keeps the one opened first (its messages and actions carry its id); the others
        resolve as duplicates of it (returned as changes, so their alerts end too)."""
        keep, dupes = adopt(self.store.open_incidents())
        ended = [
            IncidentChange(
                Change.RESOLVED,
                replace(d, status=IncidentStatus.RESOLVED, resolved_at=now, updated_at=now),
            )
            for d, _ in dupes
        ]
        if ended:
            self.store.save_incidents(c.incident for c in ended)
            for d, into in dupes:
                self.store.audit(
                    now,
                    "incident",
                    f"incident {d.id} resolved as a duplicate of {into} (same {d.entity_key}); "
                    f"{actor} adopted {into}",
                    actor=actor,
                    incident_id=d.id,
                    target=d.node or d.gpu_uuid or d.job or "fleet",
                    detail={"duplicate_of": into},
                )
        self.memory = replace(
            self.memory, tracker=TrackerState.from_records(self.store.cluster, keep)
        )
        self.attached = frozenset()
        self._kept.clear()
        self.loaded_at = now
        return ended

    def first_look(self, now: float, actor: str) -> bool:
        """This process first collected the fleet at `now`: note whether any replica watched
        it before (the journal's first `watch` row; written now on a fresh install)."""
        rows = self.store.audit_of(WATCH, [WATCH_TARGET])
        if not rows:
            self.store.audit(
                now, WATCH, "gpufleet started watching the fleet", actor=actor, target=WATCH_TARGET
            )
        since = rows[0].at if rows else now
        self.memory = replace(self.memory, watched_before=since < now, first_watched=since)
        return since < now

    def journal_summary(self, now: float) -> JournalSummary:
        g = self.policy.gates
        horizon = now - max(g.attempts.window, 3600.0, g.attempts.cooldown)
        open_ids = {str(t.incident_id) for t in self.memory.tracker.open()}
        return summarize(self.store.briefs(horizon), open_ids, cluster=self.store.cluster, now=now)

    def verdicts(self, findings: Sequence[Finding]) -> dict[str, float]:
        """GPU UUID -> the latest passed or waived diagnostic covering it (its own or its
        node's), for the GPUs of held findings (remediations.incidents.HELD_EVIDENCE)."""
        out: dict[str, float] = {}
        for f in findings:
            if f.kind not in HELD_EVIDENCE or f.gpu_uuid is None or f.gpu_uuid in out:
                continue
            d = latest_diagnosis(self.store, scope(f"gpu/{f.gpu_uuid}", f.node))
            if d is not None and d.outcome in ("passed", "waived"):
                out[f.gpu_uuid] = d.at
        return out

    def shadow_for(self, rule: str | None) -> bool:
        """Whether actions of the rule named `rule` (None or a name no rule has, such as a
        scheduled job's `schedule:<job>`: the policy's top level) are shadow."""
        if self.force_shadow:
            return True
        found = self.policy.rule_named(rule) if rule is not None else None
        return self.policy.actuation_of(found) is Actuation.SHADOW

    @property
    def may_write(self) -> bool:
        """Whether any decision of this journal can reach Kubernetes."""
        return not self.force_shadow and self.policy.live_anywhere

    def cycle(
        self, findings: Sequence[Finding], view: ClusterView | None, now: float
    ) -> CycleResult:
        """Decide on one cycle's findings and journal the outcome (before anything acts)."""
        view = view if view is not None else ClusterView.from_findings(findings)
        self.expire(now)
        state = self.store.engine_state()
        summary = replace(self.journal_summary(now), verdicts=self.verdicts(findings))
        result = decide(
            self.policy,
            findings,
            view,
            now,
            self.memory,
            state,
            summary,
            shadow=self.force_shadow,
            not_before=self.started_at,
        )
        self.store.save_incidents(c.incident for c in result.changes)
        resolved = {str(c.incident.id) for c in result.changes if c.change is Change.RESOLVED}
        if resolved:
            self._expire_resolved(resolved, result, now)
        if result.trip is not None:
            self.store.trip_breaker(result.trip, now)
        self._journal(result.decisions, now)
        self.memory = result.memory
        self.attached = result.attached
        return result

    def _expire_resolved(self, resolved: set[str], result: CycleResult, now: float) -> None:
        """Resolved incidents expire their unstarted actions, unless another still-open
        incident joined the same action (same playbook and target): then it stays."""
        open_ids = {str(t.incident_id) for t in result.memory.tracker.open()}
        waiting = self.store.actions([ActionState.AWAITING_APPROVAL, ActionState.APPROVED])
        asking = self.store.actions(
            [ActionState.SHADOW], since=now - self.policy.gates.approval_timeout
        )
        for a in (*waiting, *(a for a in asking if _would_ask(a, now))):
            if a.incident_id not in resolved and a.id not in self._kept:
                continue
            if a.incident_id in open_ids:
                continue
            if (a.playbook, a.target) in result.attached:
                self._kept.add(a.id)
                continue
            self._kept.discard(a.id)
            if a.state is ActionState.SHADOW:  # its live twin would expire: the request ends
                self.store.update_action(
                    a, now, deadline=now, message="shadow: would expire (incident resolved)"
                )
            else:
                self.store.update_action(
                    a, now, state=ActionState.EXPIRED, result="expired: incident resolved"
                )

    def _journal(self, decisions: Sequence[ActionDecision], now: float) -> None:
        """Journal a cycle's decisions in one transaction (before the executor can act)."""
        news: list[NewAction] = []
        denials: list[dict[str, object]] = []
        for d in decisions:
            if d.merged_into is not None:
                denials.append(
                    {
                        "kind": "merge",
                        "message": f"merged: incident {d.incident_id} joins this action",
                        "action_id": d.merged_into,
                        "incident_id": d.incident_id,
                        "target": d.target,
                        "detail": {"reasons": list(d.reasons), "rule": d.rule},
                    }
                )
                continue
            if d.decision is Verdict.DENY or d.plan is None:
                denials.append(
                    {
                        "message": denial_message(d),
                        "incident_id": d.incident_id,
                        "target": d.target,
                        "detail": {
                            "reasons": list(d.reasons),
                            "rule": d.rule,
                            "escalate": d.escalate,
                            "notify_only": d.mode is Mode.NOTIFY,
                        },
                    }
                )
                asked = escalation(self.store, d)
                if asked is not None:
                    denials.append(asked)
                continue
            news.append(self._new_action(d, d.plan, now, self._params(d.rule)))
        self.store.propose_many(news, now, denials)

    def _new_action(
        self, d: ActionDecision, plan: Plan, now: float, params: Mapping[str, object]
    ) -> NewAction:
        """The journal row of a decision: live (awaiting approval or approved) or shadow (what
        would be done, with `shadow_result` as its result)."""
        timeout = self.policy.gates.approval_timeout
        if d.shadow:
            asks = d.decision is Verdict.AWAIT_APPROVAL
            state, deadline = ActionState.SHADOW, (now + timeout if asks else None)
        elif d.decision is Verdict.AWAIT_APPROVAL:
            state, deadline = ActionState.AWAITING_APPROVAL, now + timeout
        else:
            state, deadline = ActionState.APPROVED, now + timeout
        return NewAction(
            idempotency_key=d.idempotency_key,
            incident_id=d.incident_id,
            playbook=d.playbook,
            target=d.target,
            target_nodes=plan.target_nodes,
            disruptive=plan.disruptive,
            mode=d.mode,
            rule=d.rule,
            state=state,
            decision=d.decision,
            reasons=d.reasons,
            params=dict(params),
            plan=plan.intents,
            shadow=d.shadow,
            attempt=d.attempt,
            result=shadow_result(d) if d.shadow else "",
            deadline=deadline,
        )

    def record(
        self, d: ActionDecision, now: float, params: Mapping[str, object] | None = None
    ) -> ActionRecord | None:
        """Journal one decision made outside `cycle` (a scheduled job's, which no rule made)
        exactly as a cycle journals its own: a denial as an audit row (None), else the action
        (live: approved or awaiting approval; `d.shadow`: state SHADOW with "shadow: would ..."
        as its result, never executed). `params`: the playbook's (default: the rule's)."""
        if d.decision is Verdict.DENY or d.plan is None:
            self.store.propose_many(
                [],
                now,
                [
                    {
                        "message": denial_message(d),
                        "incident_id": d.incident_id,
                        "target": d.target,
                        "detail": {"reasons": list(d.reasons), "rule": d.rule},
                    }
                ],
            )
            return None
        p = self._params(d.rule) if params is None else params
        action, _ = self.store.propose(self._new_action(d, d.plan, now, p), now)
        return action

    def open_incidents(self) -> list[Tracked]:
        """The open incidents as of the latest cycle (the tracker's view: the stored rows are
        written when an incident changes, so their last_seen can be older than the evidence)."""
        return list(self.memory.tracker.open())

    def _params(self, rule_name: str) -> dict[str, object]:
        return dict(self._rule_params.get(rule_name, {}))

    def expire(self, now: float) -> int:
        """Awaiting approval (or approved and never started) past the deadline: expired."""
        n = 0
        for a in self.store.due(now):
            if self.store.update_action(
                a, now, state=ActionState.EXPIRED, result="expired: deadline passed"
            ):
                n += 1
        return n

    def approve(self, action_id: str, actor: str, now: float) -> ActionRecord:
        """A person's approval, re-checked against the journal as it is now: a request that
        no longer fits (its incident ended, its node or GPU was returned, a newer action did
        the job: `remediations.staleness`) expires with that reason instead (its `result`
        tells the person why)."""
        a = self.store.get_action(action_id)
        if a is not None and a.state is ActionState.AWAITING_APPROVAL:
            why = stale_reason(self.store, a)
            if why is not None:
                done = self.store.update_action(
                    a,
                    now,
                    state=ActionState.EXPIRED,
                    actor=actor,
                    audit_kind="approval",
                    message=f"approval by {actor} came too late; expired: {why}",
                    result=f"expired on approval: {why}",
                )
                if done is None:
                    raise ValueError(f"action {action_id} changed meanwhile; look again")
                return done
        return self._person(action_id, actor, now, ActionState.APPROVED, "approval")

    def reject(self, action_id: str, actor: str, now: float, reason: str = "") -> ActionRecord:
        return self._person(action_id, actor, now, ActionState.REJECTED, "approval", reason)

    def _person(
        self,
        action_id: str,
        actor: str,
        now: float,
        to: ActionState,
        kind: str,
        reason: str = "",
    ) -> ActionRecord:
        a = self.store.get_action(action_id)
        if a is None:
            raise LookupError(f"no action {action_id}")
        if a.state is ActionState.SHADOW:
            raise ValueError(
                f"action {action_id} was decided in shadow mode (actuation: shadow): it records "
                "what gpufleet would have done and is never executed; set `actuation: live` in "
                "the policy (top level or this rule) to act"
            )
        if a.state is not ActionState.AWAITING_APPROVAL:
            raise ValueError(f"action {action_id} is {a.state.value}, not awaiting approval")
        verb = "approved" if to is ActionState.APPROVED else "rejected"
        done = self.store.update_action(
            a,
            now,
            state=to,
            actor=actor,
            audit_kind=kind,
            message=f"{verb} by {actor}" + (f": {reason}" if reason else ""),
            approved_by=actor,
            result=reason,
        )
        if done is None:
            raise ValueError(f"action {action_id} changed meanwhile; look again")
        return done

    def open_incident_ids(self) -> set[str]:
        return {str(t.incident_id) for t in self.memory.tracker.open()}

    def still_needed(self, action: ActionRecord) -> str | None:
        """The executor's default freshness check: the action's incident must still be open in
        the latest cycle's data (call `cycle` with current findings right before `run`)."""
        if action.incident_id in self.open_incident_ids():
            return None
        if (action.playbook, action.target) in self.attached:
            return None  # another open incident joined this action
        return f"incident {action.incident_id} is no longer open in current data"


def adopt(
    records: Iterable[IncidentRecord],
) -> tuple[list[IncidentRecord], list[tuple[IncidentRecord, str]]]:
    """Open incidents -> (one per entity: the first opened, [(duplicate, id it joins)])."""
    rows = list(records)
    first: dict[str, IncidentRecord] = {}
    for r in sorted(rows, key=lambda r: (r.opened_at, str(r.id))):
        first.setdefault(r.entity_key, r)
    dupes = [(r, str(first[r.entity_key].id)) for r in rows if first[r.entity_key].id != r.id]
    return list(first.values()), dupes


class _ReplayStore(Store):
    """The shadow replay's in-memory journal, remembering its per-cycle reads (the engine
    state, the action briefs, and the audit rows `verdicts` asks about each held finding's GPU
    every cycle) between writes. Every write passes through this object and carries its time,
    so a remembered read is exact: it is asked again after any write that could change it, or
    once an action written earlier leaves the briefs' time horizon."""

    def __init__(self, engine: Any, cluster: str = "default") -> None:
        super().__init__(engine, cluster)
        self._state: EngineState | None = None
        self._briefs: tuple[float, list[ActionBrief]] | None = None
        self._writes: list[float] = []
        """Times of action writes, in order (a replay's clock only moves forward)."""
        self._audits: dict[tuple[str, tuple[str, ...]], list[AuditRecord]] = {}
        """audit_of answers since the last audit row was written (any kind, any path)."""

    def audit_of(self, kind: str, targets: Iterable[str]) -> list[AuditRecord]:
        key = (kind, tuple(targets))
        rows = self._audits.get(key)
        if rows is None:
            rows = self._audits[key] = super().audit_of(kind, key[1])
        return list(rows)

    def _audit_row(self, *args: Any, **fields: Any) -> None:
        self._audits.clear()
        super()._audit_row(*args, **fields)

    def insert_audit_rows(self, rows: Iterable[Mapping[str, Any]]) -> None:
        self._audits.clear()
        super().insert_audit_rows(rows)

    def _wrote(self, now: float) -> None:
        self._state, self._briefs = None, None
        if not self._writes or now >= self._writes[-1]:
            self._writes.append(now)
        else:  # a clock going back: remember nothing from here on
            self._writes.append(math.inf)

    def engine_state(self) -> EngineState:
        if self._state is None:
            self._state = super().engine_state()
        return self._state

    def briefs(self, since: float) -> list[ActionBrief]:
        if self._briefs is not None:
            before, briefs = self._briefs
            left = bisect.bisect_left(self._writes, before)
            if since >= before and (left == len(self._writes) or self._writes[left] >= since):
                return briefs  # no action was last written in [before, since)
        briefs = super().briefs(since)
        self._briefs = (since, briefs)
        return briefs

    def propose(self, new: NewAction, now: float) -> tuple[ActionRecord, bool]:
        self._wrote(now)
        return super().propose(new, now)

    def propose_many(
        self, news: Sequence[NewAction], now: float, denials: Sequence[Mapping[str, Any]] = ()
    ) -> int:
        if news:  # denials are audit rows only
            self._wrote(now)
        if news or denials:  # each writes audit rows
            self._audits.clear()
        return super().propose_many(news, now, denials)

    def update_action(self, action: ActionRecord, now: float, **fields: Any) -> ActionRecord | None:
        self._wrote(now)
        return super().update_action(action, now, **fields)

    def claim(
        self, action: ActionRecord, state_version: int, now: float, owner: str, lease_until: float
    ) -> ActionRecord | None:
        self._wrote(now)
        return super().claim(action, state_version, now, owner, lease_until)

    def trip_breaker(self, reason: str, now: float) -> bool:
        self._wrote(now)
        return super().trip_breaker(reason, now)

    def reset_breaker(self, actor: str, now: float) -> bool:
        self._wrote(now)
        return super().reset_breaker(actor, now)

    def set_paused(self, paused: bool, actor: str, reason: str, now: float) -> None:
        self._wrote(now)
        super().set_paused(paused, actor, reason, now)


class _ReplayJournal(DecisionJournal):
    """The journal as a replay runs it: no person approves or rejects during a replay, so new
    deadlines come only from the journal's own proposals, and `expire` needs to ask the journal
    only once the earliest of them has passed (the same answers, one query less per cycle)."""

    next_deadline = -math.inf
    """A lower bound of the deadlines of the actions awaiting approval or start."""

    def expire(self, now: float) -> int:
        if now < self.next_deadline:
            return 0
        n = super().expire(now)
        self.refresh_deadline()
        return n

    def refresh_deadline(self) -> None:
        waiting = [a.deadline for a in self.store.due(math.inf) if a.deadline is not None]
        self.next_deadline = min(waiting, default=math.inf)


class ShadowReplay:
    """The decision journal in shadow on an in-memory journal: what `gpufleet backtest` asks
    (every rule in shadow, so nothing is written anywhere).

    >>> eng = ShadowReplay()                  # the shipped default policy
    >>> for t, findings, view in steps:       # view may be None (metrics-only backtest)
    ...     decisions = eng.step(findings, view, t)
    >>> [d.to_json() for d in eng.decisions]
    """

    def __init__(self, policy: Policy | None = None, started_at: float = 0.0) -> None:
        self.store = _ReplayStore.open("sqlite://", cluster="backtest")
        self.journal = _ReplayJournal(
            policy or load_policy(), self.store, started_at=started_at, shadow=True
        )
        self.decisions: list[ActionDecision] = []

    def step(
        self, findings: Sequence[Finding], view: ClusterView | None, now: float
    ) -> list[ActionDecision]:
        result = self.journal.cycle(findings, view, now)
        if result.decisions:
            self.journal.refresh_deadline()
        self.decisions.extend(result.decisions)
        return result.decisions

    def close(self) -> None:
        self.store.close()


def replay_episodes(
    findings: Sequence[Finding],
    step: float,
    policy: Policy | None = None,
    view: ClusterView | None = None,
) -> list[ActionDecision]:
    """Dry-run decisions for episode findings (one per continuous episode, as `gpufleet
    backtest` reports them): at each step from the first `first_seen` to a few steps past the
    last `last_seen`, every episode active then is presented as seen at that step."""
    if not findings:
        return []
    replay = ShadowReplay(policy, started_at=min(f.first_seen for f in findings) - step)
    t = min(f.first_seen for f in findings)
    end = max(f.last_seen for f in findings)
    tail = (replay.journal.policy.hysteresis.resolve_after + 1) * step
    try:
        while t <= end + tail:
            active = [replace(f, last_seen=t) for f in findings if f.first_seen <= t <= f.last_seen]
            replay.step(active, view, t)
            t += step
        return replay.decisions
    finally:
        replay.close()


__all__ = [
    "Change",
    "DecisionJournal",
    "ShadowReplay",
    "replay_episodes",
    "summarize",
]
