"""After the retry budget, a person: what the attempts gate's escalation writes, once.

A failed action (a reset Job that failed, a reboot that never came back) is retried by the next
cycles within `gates.attempts` (no sooner than `cooldown` after the last attempt, at most
`max_attempts` within `window`). Past that budget the gate escalates: the decision is a denial,
and a person must look. This turns the escalation into the `needs_person` row the alerts outbox
posts and the hold reconciler counts as an owner, written once per incident and playbook (the
denial itself is reported again whenever its reasons change, and after a leader change).
"""

from __future__ import annotations

from typing import Any

from remediations.decisions import ActionDecision
from remediations.store import Store
from remediations.validation import NEEDS_PERSON


def escalation(store: Store, d: ActionDecision) -> dict[str, Any] | None:
    """The `needs_person` audit row (as `propose_many` takes it) for an escalated decision,
    or None: not escalated, shadow, or the person was already asked for this incident's
    `d.playbook`."""
    if not d.escalate or d.shadow or d.plan is None:
        return None
    for r in store.audit_of(NEEDS_PERSON, [d.target]):
        if r.incident_id == d.incident_id and r.detail.get("playbook") == d.playbook:
            return None
    tried = [
        a
        for a in store.actions(target=d.target)
        if a.incident_id == d.incident_id and a.playbook == d.playbook
    ]
    last = max(tried, key=lambda a: a.created_at, default=None)
    failed = f"; the last attempt: {last.state.value}: {last.result}" if last else ""
    why = "; ".join(d.reasons)
    return {
        "kind": NEEDS_PERSON,
        "message": (f"{d.playbook} on {d.target} will not be tried again ({why}){failed}")[:1000],
        "incident_id": d.incident_id,
        "target": d.target,
        "detail": {
            "playbook": d.playbook,
            "rule": d.rule,
            "node": d.plan.target_nodes[0] if d.plan.target_nodes else "",
            "attempts": len(tried),
        },
    }
