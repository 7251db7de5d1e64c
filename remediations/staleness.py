"""Whether an action a person was asked about still fits the world it was asked in.

An approval can arrive hours after the request. By then the node may have been returned to
service, or a newer action may have done the job; approving the old request would then cordon a
healthy node and strand it (nothing holds it for a reason any more). So a person's approval, and
the executor right before it starts an approved action, re-check it against the journal: its
incident has ended, its node or GPU was returned to service after it was requested, or a newer
action of the same playbook on the same target has been carried out. The dashboard asks the same
question to mark such a request stale before anyone clicks.
"""

from __future__ import annotations

from datetime import UTC, datetime

from remediations.store import ActionRecord, Store
from remediations.types import ActionState, IncidentStatus
from remediations.validation import RETURN_PLAYBOOKS

_CARRIED = (ActionState.EXECUTING, ActionState.VERIFYING, ActionState.DONE)


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _targets(a: ActionRecord) -> tuple[str, ...]:
    nodes = tuple(f"node/{n}" for n in a.target_nodes if f"node/{n}" != a.target)
    return (a.target, *nodes)


def _joined(store: Store, a: ActionRecord) -> bool:
    """Another incident on the action's nodes is open (it may have joined the action)."""
    return any(
        i.status is IncidentStatus.OPEN and i.id != a.incident_id
        for n in a.target_nodes
        for i in store.incidents_on(n)
    )


def stale_reason(store: Store, a: ActionRecord, *, incident: bool = True) -> str | None:
    """Why `a` no longer fits (None: it still does). `incident=False` skips the incident check
    (the executor's freshness check already weighs it against the latest cycle's data)."""
    if a.playbook in RETURN_PLAYBOOKS:
        return None
    if incident:
        inc = store.get_incident(a.incident_id)
        if inc is not None and inc.status is IncidentStatus.RESOLVED and not _joined(store, a):
            ended = inc.resolved_at if inc.resolved_at is not None else inc.updated_at
            return f"its incident {inc.id[:12]} ({inc.kind}) ended at {_utc(ended)}"
    for t in _targets(a):
        for b in store.actions(target=t):
            if b.id == a.id or b.created_at <= a.created_at:
                continue
            if b.playbook in RETURN_PLAYBOOKS and b.state is ActionState.DONE:
                return (
                    f"{t} was returned to service by {b.playbook} (action {b.id[:12]}) at "
                    f"{_utc(b.updated_at)}, after this was requested at {_utc(a.created_at)}"
                )
            if b.playbook == a.playbook and b.state in _CARRIED:
                return (
                    f"superseded by {b.playbook} action {b.id[:12]} on {t}, requested at "
                    f"{_utc(b.created_at)} and {b.state.value}"
                )
    return None
