"""A scheduled job's action, through the same policy gates and journal as the live cycle.

`propose` runs the policy's static and execution gates on a plan (the ones `decide` runs for an
automatic rule) and journals the outcome through the decision journal exactly as a cycle does
(`DecisionJournal.record`): a denial as an audit row; otherwise the action, with the engine's
idempotency key (`<incident>:<playbook>:<attempt>`, so the live cycle sees it as in flight for
that incident), as approved, or — in shadow — as state SHADOW with "shadow: would ..." as its
result, never executed.

Actuation: a scheduled job has no policy rule, so its actions follow the policy's top-level
`actuation` (shadow by default; the gpufleet config's `dry_run: true` forces shadow). A policy
that is shadow at the top level and live only in some rules keeps every scheduled job in shadow.

`execute` then asks the remediation cycle to carry out approved actions (`RemediationCycle.act`:
the background executor in the service, inline elsewhere), which re-checks the gates at the
moment of acting, claims, journals each write before making it, and verifies. Nothing here
writes to Kubernetes itself.
"""

from __future__ import annotations

from collections.abc import Collection

from remediations import gates
from remediations.cluster_view import ClusterView
from remediations.cycle import RemediationCycle
from remediations.decisions import SHADOW_EXECUTE, ActionDecision
from remediations.gates import Fleet
from remediations.playbooks import PLAYBOOKS, BaseParams, NoPlan, Plan, Subject
from remediations.store import ActionRecord
from remediations.types import IncidentId, Mode, Verdict, action_id
from remediations.validation import validation_for


def rule_name(job: str) -> str:
    """The `rule` column of a scheduled job's actions and denials."""
    return f"schedule:{job}"


def in_shadow(loop: RemediationCycle, job: str) -> bool:
    """Whether the scheduled job `job` only journals what it would do (the policy's top-level
    actuation, or a forced shadow)."""
    return loop.engine.shadow_for(rule_name(job))


def propose(
    loop: RemediationCycle,
    job: str,
    incident_id: str,
    kind: str,
    last_seen: float,
    plan: Plan,
    view: ClusterView,
    now: float,
    *,
    reasons: tuple[str, ...],
    params: BaseParams | None = None,
) -> tuple[ActionRecord | None, tuple[str, ...]]:
    """(journaled action, reasons). None with the gate reasons when a gate denies or waits, or
    with one reason when this incident already has this playbook in flight, done or rejected
    (a shadow action counts as done: a shadow job journals what it would do once)."""
    engine = loop.engine
    store = engine.store
    g = engine.policy.gates
    summary = engine.journal_summary(now)
    key = (incident_id, plan.playbook)
    if key in summary.blocked:
        return None, (f"{plan.playbook} already journaled for incident {incident_id}",)
    results = gates.static_gates(
        g, plan, view, kind, summary.ledger, now, last_seen, engine.started_at
    )
    results.append(gates.validated(plan, validation_for(store, plan, now, g)))
    results += gates.execution_gates(
        g, plan, Fleet.of(view, g.pool_label), store.engine_state(), summary.ledger, now
    )
    failed = [r for r in results if not r.ok]
    shadow = in_shadow(loop, job)
    decision = ActionDecision(
        playbook=plan.playbook,
        target=plan.target,
        decided_at=now,
        decision=Verdict.DENY if failed else Verdict.EXECUTE,
        reasons=tuple(f"{r.gate}: {r.reason}" for r in failed)
        or (*reasons, "all gates passed", *((SHADOW_EXECUTE,) if shadow else ())),
        incident_id=IncidentId(incident_id),
        rule=rule_name(job),
        mode=Mode.AUTO,
        shadow=shadow,
        plan=plan,
        attempt=summary.attempts.get(key, 0) + 1,
    )
    if failed:
        engine.record(decision, now)
        return None, decision.reasons
    loop.judged_by_job(action_id(store.cluster, decision.idempotency_key))
    action = engine.record(
        decision, now, params.model_dump(mode="json") if params is not None else {}
    )
    return action, decision.reasons


def execute(
    loop: RemediationCycle, mine: Collection[str], view: ClusterView, now: float
) -> list[ActionRecord]:
    """Carry out the approved actions (the runner re-checks the gates at the moment of acting).
    The scheduled job's own actions (`mine`, marked by `propose`) need no open incident in the
    latest cycle (a quarantined node's incident may have resolved); every other action keeps
    the live cycle's freshness check. With the service's background executor this only wakes
    it (returns nothing): a drain waiting on a disruption budget never holds the job's lock,
    so detection cycles keep their cadence. Shadow actions are never carried out."""
    for a in mine:
        loop.judged_by_job(a)
    return loop.act(now, view)


def plan_for(playbook: str, subject: Subject, view: ClusterView, params: BaseParams) -> Plan | str:
    """The playbook's plan for this subject, or why there is none."""
    planned = PLAYBOOKS[playbook].plan(subject, view, params)
    return planned.reason if isinstance(planned, NoPlan) else planned
