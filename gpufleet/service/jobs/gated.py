"""A scheduled job's action, through the same policy gates and journal as the live cycle.

`propose` runs the policy's static and execution gates on a plan (the ones `decide` runs for an
automatic rule), journals a denial like the engine does, or journals the action as approved with
the engine's idempotency key (`<incident>:<playbook>:<attempt>`, so the live cycle sees it as
in flight for that incident). `execute` then hands approved actions to the loop's runner, which
re-checks the gates at the moment of acting, claims, journals each write before making it, and
verifies. Nothing here writes to Kubernetes itself.
"""

from __future__ import annotations

from collections.abc import Collection

from remediations import gates
from remediations.cluster_view import ClusterView
from remediations.cycle import RemediationLoop
from remediations.gates import Fleet
from remediations.playbooks import PLAYBOOKS, BaseParams, NoPlan, Plan, Subject
from remediations.store import ActionRecord, NewAction
from remediations.types import ActionState, IncidentId, Mode, Verdict


def rule_name(job: str) -> str:
    """The `rule` column of a scheduled job's actions and denials."""
    return f"schedule:{job}"


def propose(
    loop: RemediationLoop,
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
    with one reason when this incident already has this playbook in flight, done or rejected."""
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
    results += gates.execution_gates(
        g, plan, Fleet.of(view, g.pool_label), store.engine_state(), summary.ledger, now
    )
    failed = [r for r in results if not r.ok]
    if failed:
        why = tuple(f"{r.gate}: {r.reason}" for r in failed)
        store.propose_many(
            [],
            now,
            [
                {
                    "message": f"{plan.playbook} on {plan.target}: deny",
                    "incident_id": incident_id,
                    "target": plan.target,
                    "detail": {"reasons": list(why), "rule": rule_name(job)},
                }
            ],
        )
        return None, why
    attempt = summary.attempts.get(key, 0) + 1
    dry = engine.dry_run
    timeout = g.approval_timeout
    new = NewAction(
        idempotency_key=f"{incident_id}:{plan.playbook}:{attempt}",
        incident_id=IncidentId(incident_id),
        playbook=plan.playbook,
        target=plan.target,
        target_nodes=plan.target_nodes,
        disruptive=plan.disruptive,
        mode=Mode.AUTO,
        rule=rule_name(job),
        state=ActionState.DONE if dry else ActionState.APPROVED,
        decision=Verdict.EXECUTE,
        reasons=(
            *reasons,
            "all gates passed",
            *(("dry-run: recorded, not executed",) if dry else ()),
        ),
        params=params.model_dump(mode="json") if params is not None else {},
        plan=plan.intents,
        dry_run=dry,
        attempt=attempt,
        result="dry-run: not executed" if dry else "",
        deadline=None if dry else now + timeout,
    )
    action, _ = store.propose(new, now)
    return action, new.reasons


def execute(
    loop: RemediationLoop, mine: Collection[str], view: ClusterView, now: float
) -> list[ActionRecord]:
    """Start the approved actions (the runner re-checks the gates). The scheduled job's own
    actions need no open incident in the latest cycle (a quarantined node's incident may have
    resolved); every other action keeps the live cycle's freshness check."""
    engine = loop.engine

    def fresh(a: ActionRecord) -> str | None:
        return None if a.id in mine else engine.still_needed(a)

    if engine.dry_run:
        return []
    return loop.runner.run(view, now, fresh=fresh)


def plan_for(playbook: str, subject: Subject, view: ClusterView, params: BaseParams) -> Plan | str:
    """The playbook's plan for this subject, or why there is none."""
    planned = PLAYBOOKS[playbook].plan(subject, view, params)
    return planned.reason if isinstance(planned, NoPlan) else planned
