"""After the retry budget, a person: what the attempts gate's escalation writes, once.

A failed action (a reset Job that failed, a reboot that never came back) is retried by the next
cycles within `gates.attempts` (no sooner than `cooldown` after the last attempt, at most
`max_attempts` within `window`). Past that budget the gate escalates: the decision is a denial,
and a person must look. This turns the escalation into the `needs_person` row the alerts outbox
posts and the hold reconciler counts as an owner, written once per incident and playbook (the
denial itself is reported again whenever its reasons change, and after a leader change). Both
places the gate can escalate write it here: the journal's decision, and the executor finding
an approved action's budget spent when it is about to start.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from remediations.decisions import ActionDecision
from remediations.store import ActionRecord, Store
from remediations.types import IncidentId
from remediations.validation import NEEDS_PERSON


def escalation(store: Store, d: ActionDecision) -> dict[str, Any] | None:
    """The `needs_person` audit row (as `propose_many` takes it) for an escalated decision,
    or None: not escalated, shadow, or the person was already asked for this incident's
    `d.playbook`."""
    if not d.escalate or d.shadow or d.plan is None:
        return None
    node = d.plan.target_nodes[0] if d.plan.target_nodes else ""
    return needs_person(store, d.incident_id, d.playbook, d.target, d.rule, node, d.reasons)


def escalated_start(store: Store, a: ActionRecord, reason: str) -> dict[str, Any] | None:
    """The same row for an approved action whose attempt budget is spent when it is about to
    start (the executor's last look), or None if the person was already asked."""
    node = a.target_nodes[0] if a.target_nodes else ""
    return needs_person(store, a.incident_id, a.playbook, a.target, a.rule, node, (reason,))


def needs_person(
    store: Store,
    incident_id: IncidentId,
    playbook: str,
    target: str,
    rule: str,
    node: str,
    reasons: Sequence[str],
) -> dict[str, Any] | None:
    """One `needs_person` row per (incident, playbook), naming the attempts and the last one's
    outcome; None when it was already written."""
    for r in store.audit_of(NEEDS_PERSON, [target]):
        if r.incident_id == incident_id and r.detail.get("playbook") == playbook:
            return None
    tried = [
        a
        for a in store.actions(target=target)
        if a.incident_id == incident_id and a.playbook == playbook
    ]
    done = [a for a in tried if a.started_at is not None]
    last = max(done, key=lambda a: a.created_at, default=None)
    failed = f"; the last attempt: {last.state.value}: {last.result}" if last else ""
    why = "; ".join(reasons)
    return {
        "kind": NEEDS_PERSON,
        "message": (f"{playbook} on {target} will not be tried again ({why}){failed}")[:1000],
        "incident_id": incident_id,
        "target": target,
        "detail": {"playbook": playbook, "rule": rule, "node": node, "attempts": len(done)},
    }
