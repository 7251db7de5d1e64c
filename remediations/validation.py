"""Return to service on evidence: the journal's diagnostic verdicts and gpufleet's changes.

A diagnostic verdict is an audit row of kind `diagnostic` about `node/<name>` or `gpu/<uuid>`
(detail: `outcome` passed/failed/waived, `node`, `job`), written by the diagnostic job when a
`dcgmi diag` Job finishes, or by a person's waiver (`gpufleet diagnostics waive`). A change is any
gpufleet action on the target (or on the GPU's node) that started and is not itself a return to
service: a fence, quarantine, cordon, drain, a GPU reset, a reboot, a replacement mark, whatever
playbook made it. So a repair needs no hook of its own: a reset or reboot journaled after the last
diagnostic makes the GPU or node wait for a new one. `validation_for` hands the pure gate
(`gates.validated`) what it weighs; the executor asks it right before every return it carries out.

A passed diagnostic is not enough on its own: a GPU whose DBE counter still rises passes a test
that does not exercise the bad row. So the gate also weighs the incidents: none of warning or
critical severity about the hardware (XID, memory, lost, interconnect) may be open on the GPU or
its node (a node's return: on the node or any of its GPUs), and the latest finding about that
hardware must be at least the policy's `return_quiet` old. The XID incident closes on the
driver's verdict (a diagnostic passed and no new occurrence), so waiting on it never deadlocks.
"""

from __future__ import annotations

from remediations.gates import Diagnosis, Validation, returns_to_service
from remediations.playbooks import Plan
from remediations.policy import Gates
from remediations.repeats import hardware_incidents, lemon
from remediations.store import ActionRecord, IncidentRecord, Store
from remediations.types import ACTOR, ActionState, IncidentStatus

DIAGNOSTIC = "diagnostic"
"""The audit kind of a diagnostic verdict."""
OUTCOMES = ("passed", "failed", "waived")
NEEDS_PERSON = "needs_person"
"""Audit kind of what a person must act on (the alerts outbox posts it)."""
RETURN_PLAYBOOKS = frozenset({"uncordon", "unfence_gpu"})
_UNTOUCHED = frozenset(
    {
        ActionState.PROPOSED,
        ActionState.AWAITING_APPROVAL,
        ActionState.APPROVED,
        ActionState.EXPIRED,
        ActionState.REJECTED,
        ActionState.DENIED,
        ActionState.SHADOW,
    }
)


def record_diagnosis(
    store: Store,
    now: float,
    subject: str,
    outcome: str,
    *,
    node: str,
    job: str = "",
    actor: str = ACTOR,
    note: str = "",
) -> None:
    """Journal one verdict on `subject` (`node/<n>` or `gpu/<uuid>` on `node`)."""
    if outcome not in OUTCOMES:
        raise ValueError(f"diagnostic outcome must be one of {OUTCOMES}, not {outcome!r}")
    by = f" by {actor}" if outcome == "waived" else ""
    store.audit(
        now,
        DIAGNOSTIC,
        f"diagnostic {outcome}{by} on {subject}"
        + (f" (job {job})" if job else "")
        + (f": {note}" if note else ""),
        actor=actor,
        target=subject,
        detail={"outcome": outcome, "node": node, "job": job, "note": note},
    )


def scope(target: str, node: str | None) -> tuple[str, ...]:
    """The journal targets that speak for `target`: a GPU's own and its node's (a node-wide
    diagnostic tests every GPU; a reboot of the node touches every GPU)."""
    if target.startswith("gpu/") and node is not None:
        return (target, f"node/{node}")
    return (target,)


def _touched(a: ActionRecord) -> bool:
    return a.playbook not in RETURN_PLAYBOOKS and (
        a.started_at is not None or a.state not in _UNTOUCHED
    )


def last_change(
    store: Store, targets: tuple[str, ...], besides: frozenset[str] = frozenset()
) -> ActionRecord | None:
    """gpufleet's latest action on these targets that may have written to the cluster (other
    than by the playbooks `besides`)."""
    found = [
        a
        for t in targets
        for a in store.actions(target=t)
        if _touched(a) and a.playbook not in besides
    ]
    return max(found, key=lambda a: a.started_at or a.created_at, default=None)


def latest_diagnosis(store: Store, targets: tuple[str, ...]) -> Diagnosis | None:
    rows = store.audit_of(DIAGNOSTIC, targets)
    if not rows:
        return None
    r = max(rows, key=lambda r: (r.at, r.id))
    return Diagnosis(
        r.target, str(r.detail.get("outcome", "")), r.at, r.actor, str(r.detail.get("note", ""))
    )


_SERIOUS = frozenset({"warning", "critical"})


def _describe(i: IncidentRecord) -> str:
    return f"{i.kind} {i.severity} incident {i.id[:12]}: {i.summary}"


def validation_for(store: Store, plan: Plan, now: float, g: Gates) -> Validation | None:
    """What the validation gate weighs for `plan` (None: the plan returns nothing to service)."""
    if not returns_to_service(plan):
        return None
    node = plan.target_nodes[0] if plan.target_nodes else None
    targets = scope(plan.target, node)
    change = last_change(store, targets)
    faults = hardware_incidents(store, plan.target, node)
    open_ = [i for i in faults if i.status is IncidentStatus.OPEN and i.severity in _SERIOUS]
    return Validation(
        None if change is None else change.started_at or change.created_at,
        "" if change is None else f"{change.playbook} (action {change.id[:12]})",
        latest_diagnosis(store, targets),
        tuple(_describe(i) for i in sorted(open_, key=lambda i: i.opened_at)),
        max((i.last_seen for i in faults), default=None),
        g.return_quiet,
        now,
        lemon(store, plan.target, node, g.lemon_window, g.lemon_repeats, now) or "",
    )


def current_verdict(store: Store, target: str, node: str | None) -> Diagnosis | None:
    """The verdict that covers `target` and postdates gpufleet's latest change to it, if any."""
    targets = scope(target, node)
    d = latest_diagnosis(store, targets)
    change = last_change(store, targets)
    if d is None or (change is not None and d.at <= (change.started_at or change.created_at)):
        return None
    return d


_IN_FLIGHT = (ActionState.APPROVED, ActionState.EXECUTING, ActionState.VERIFYING)


def in_flight(store: Store, target: str, node: str | None) -> ActionRecord | None:
    """An action on `target` (or the GPU's node) that will write and has not finished: a repair
    (reset, reboot) approved or running, a fence being verified. A diagnostic waits for it.
    One still awaiting a person's approval does not hold the diagnostic up (it may never be
    approved); if it runs later, it is a change that earns a new diagnostic."""
    for t in scope(target, node):
        for a in store.actions(_IN_FLIGHT, target=t):
            return a
    return None
