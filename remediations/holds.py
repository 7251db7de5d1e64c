"""Every hold has an owner: what gpufleet keeps out of service, and why it still does.

A hold is capacity gpufleet took away, recognised by the same marks on the object whatever the
playbook: a node gpufleet cordoned (`gpufleet.io/cordoned-by`, with `gpufleet.io/action` naming
the action) or quarantined (`gpufleet.io/quarantined`), and a GPU fenced by gpufleet's own
DeviceTaintRule. A hold is owned while one of these explains it: an open incident on the node or
GPU, an action on it that has not finished (proposed, awaiting approval, approved, running), or
a `needs_person` row written since gpufleet's latest change to it (a replacement mark is no
such change: it follows the failed diagnostic that asked the person). A hold with none is an
orphan (a drain approved after its incident ended, a half-done action nobody resumed): the
reconciler reports it once per change, and `diagnose_and_return` then diagnoses it and gives it
back through the one return rule (`remediations.validation`). A node a person cordoned carries
no gpufleet mark, so it is never a hold and never returned by gpufleet.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from remediations.capabilities import FencedGpu
from remediations.cluster_names import fence_rule_name
from remediations.cluster_view import ClusterView, NodeView
from remediations.gates import MARKS
from remediations.store import IncidentRecord, Store
from remediations.types import ACTION_ANNOTATION, QUARANTINE_LABEL, ActionState, IncidentStatus
from remediations.validation import NEEDS_PERSON, last_change, scope

ORPHAN = "orphan_hold"
"""Audit kind of a hold the reconciler found without an owner."""
_PENDING = (
    ActionState.PROPOSED,
    ActionState.AWAITING_APPROVAL,
    ActionState.APPROVED,
    ActionState.EXECUTING,
    ActionState.VERIFYING,
)


@dataclass(frozen=True, slots=True)
class Hold:
    subject: str
    """`node/<name>` or `gpu/<uuid>`."""
    node: str
    action: str
    """The action id the object's `gpufleet.io/action` names ('' if none)."""
    how: str
    """cordon, quarantine or fence."""


def marked_by_us(n: NodeView) -> bool:
    """gpufleet's marks are on this node: its cordon annotation, or its quarantine (taint and
    label, even on a node a person had cordoned: those are gpufleet's to take back, the
    cordon is not: `uncordon` only undoes gpufleet's own)."""
    return n.cordoned_by_us or QUARANTINE_LABEL in n.labels


def holds_node(n: NodeView) -> bool:
    """gpufleet holds this node out of service: quarantined, or cordoned by gpufleet."""
    return QUARANTINE_LABEL in n.labels or (n.unschedulable and n.cordoned_by_us)


def holds(view: ClusterView, fenced: Iterable[FencedGpu] = ()) -> list[Hold]:
    """Everything gpufleet holds in this view (and these fenced GPUs), by its marks."""
    out: list[Hold] = []
    for n in sorted(view.nodes.values(), key=lambda n: n.name):
        how = "quarantine" if QUARANTINE_LABEL in n.labels else "cordon"
        if holds_node(n):
            out.append(
                Hold(f"node/{n.name}", n.name, n.annotations.get(ACTION_ANNOTATION, ""), how)
            )
    for g in fenced:
        if g.rule == fence_rule_name(g.uuid):
            out.append(
                Hold(f"gpu/{g.uuid}", g.node, g.annotations.get(ACTION_ANNOTATION, ""), "fence")
            )
    return out


def owner(store: Store, h: Hold, open_: Sequence[IncidentRecord] | None = None) -> str | None:
    """What explains the hold (None: nothing does, it is an orphan). `open_`: the journal's
    open incidents, when the caller has read them already (one query for many holds)."""
    targets = scope(h.subject, h.node)
    uuid = h.subject.removeprefix("gpu/") if h.subject.startswith("gpu/") else None
    found = store.incidents_on(h.node) if open_ is None else open_
    for i in found:
        if i.node != h.node or i.status is not IncidentStatus.OPEN:
            continue
        if uuid is None or i.gpu_uuid in (None, uuid):
            return f"incident {i.id[:12]} ({i.kind} {i.severity}) is open"
    for t in targets:
        for a in store.actions(_PENDING, target=t):
            return f"{a.playbook} action {a.id[:12]} is {a.state.value}"
    change = last_change(store, targets, besides=MARKS)  # a replacement mark is the task's
    since = -1.0 if change is None else change.started_at or change.created_at
    for r in store.audit_of(NEEDS_PERSON, targets):
        if r.at >= since:
            return f"a person must act: {r.message}"
    return None


def orphans(store: Store, view: ClusterView, fenced: Iterable[FencedGpu] = ()) -> list[Hold]:
    held = holds(view, fenced)
    if not held:
        return held
    open_ = store.open_incidents()
    return [h for h in held if owner(store, h, open_) is None]


def reconcile(
    store: Store, view: ClusterView, now: float, fenced: Iterable[FencedGpu] = ()
) -> list[Hold]:
    """One pass: every orphan is reported (an `orphan_hold` audit row, once per hold and
    action); returns the orphans, which `diagnose_and_return` then diagnoses and returns."""
    found = orphans(store, view, fenced)
    if not found:
        return found
    told = {
        (r.target, r.detail.get("action", ""))
        for r in store.audit_of(ORPHAN, [h.subject for h in found])
    }
    for h in found:
        if (h.subject, h.action) in told:
            continue
        store.audit(
            now,
            ORPHAN,
            f"{h.subject} is held by gpufleet ({h.how}, action {h.action[:12] or 'unknown'}) with "
            "no open incident, pending action or person's task: it will be diagnosed and "
            "returned through the return rule",
            target=h.subject,
            detail={"node": h.node, "action": h.action, "how": h.how},
        )
    return found
