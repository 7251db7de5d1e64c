"""Out of service: each GPU or node gpufleet took out, and where its repair stands.

Read from the journal with the validation gate's own readers (`remediations.validation`), so the
page says what the gate will decide: a take-out (fence, quarantine, drain, pod eviction), the
latest repair (reset, reboot), the latest diagnostic verdict, and a state. A GPU or node is
`returned` once a return (unfence, uncordon) finished after its latest take-out; `marked for
replacement` when its latest verdict failed and no repair followed (a person's: the diagnostic
job wrote a `needs_person` row).
"""

from __future__ import annotations

from dataclasses import dataclass

from remediations.gates import Diagnosis
from remediations.store import ActionRecord, Store
from remediations.types import ActionState
from remediations.validation import (
    RETURN_PLAYBOOKS,
    in_flight,
    last_change,
    latest_diagnosis,
    scope,
)

TAKE_OUT = {
    "fence_gpu": "GPU",
    "evict_gpu_pods": "pods on GPU",
    "quarantine": "node",
    "cordon": "node",
    "drain": "node",
}
"""Playbooks that take capacity out of service, and the grain each takes."""
WAITS = "to release GPU"
"""The reset's plan while a pod holds the GPU (remediations.playbooks.reset)."""
REPAIRS = frozenset({"reset_gpu", "reboot_node"})
EMPTYING = frozenset({"drain", "evict_gpu_pods"})
MARKED = "marked for replacement (needs a person)"
STATES = (
    MARKED,
    "taking out",
    "waiting for pods to leave",
    "repairing",
    "waiting for diagnostic",
    "returning (diagnostic passed)",
    "returned",
)
"""Every state, in the order the table lists them (a person's first)."""


@dataclass(frozen=True, slots=True)
class OutOfService:
    target: str
    node: str
    grain: str
    taken_by: str
    since: float
    repair: str
    diagnostic: str
    state: str
    returned_at: float | None


def _at(a: ActionRecord) -> float:
    return a.started_at or a.created_at


def _started(a: ActionRecord) -> bool:
    return a.started_at is not None


def _node_of(a: ActionRecord) -> str:
    if a.target.startswith("node/"):
        return a.target[5:]
    return a.plan[0].target if a.plan else ""


def one(store: Store, target: str) -> OutOfService | None:
    """Where `target` stands, or None when gpufleet never took it out."""
    acts = store.actions(target=target)
    outs = [a for a in acts if a.playbook in TAKE_OUT and _started(a)]
    if not outs:
        return None
    node = _node_of(max(outs, key=_at))
    targets = scope(target, node or None)
    back = [a for a in acts if a.playbook in RETURN_PLAYBOOKS and a.state is ActionState.DONE]
    last_out = max(_at(a) for a in outs)
    returned = max((_at(a) for a in back if _at(a) > last_out), default=None)
    earlier_back = max((_at(a) for a in back if _at(a) <= last_out), default=0.0)
    episode = [a for a in outs if _at(a) > earlier_back]
    repairs = [a for t in targets for a in store.actions(target=t) if a.playbook in REPAIRS]
    repair = max(repairs, key=_at, default=None)
    d = latest_diagnosis(store, targets)
    verdict = ""
    if d is not None:
        verdict = d.outcome + (f" by {d.by}" if d.outcome == "waived" else "")
    return OutOfService(
        target=target,
        node=node,
        grain=", ".join(sorted({TAKE_OUT[a.playbook] for a in episode})),
        taken_by=", ".join(sorted({a.playbook for a in episode})),
        since=min(_at(a) for a in episode),
        repair="" if repair is None else _repair(repair),
        diagnostic=verdict,
        state=_state(store, target, node, returned, repair, d, _waits_for_pod(store, episode)),
        returned_at=returned,
    )


def _repair(a: ActionRecord) -> str:
    return f"{a.playbook}: {a.state.value}" + (f" ({a.result})" if a.result else "")


def _state(
    store: Store,
    target: str,
    node: str,
    returned: float | None,
    repair: ActionRecord | None,
    d: Diagnosis | None,
    waits: float | None,
) -> str:
    if returned is not None:
        return "returned"
    busy = in_flight(store, target, node or None)
    if busy is not None:
        if busy.playbook in EMPTYING:
            return "waiting for pods to leave"
        return "repairing" if busy.playbook in REPAIRS else "taking out"
    repaired_after = (
        repair is not None and _started(repair) and d is not None and _at(repair) > d.at
    )
    if d is not None and d.outcome == "failed" and not repaired_after:
        return MARKED
    change = last_change(store, scope(target, node or None))
    if (
        waits is not None
        and (change is None or waits >= _at(change))
        and (d is None or waits > d.at)
    ):
        return "waiting for pods to leave"
    fresh = d is not None and (change is None or d.at > _at(change) or _is_mark(change))
    if fresh and d is not None and d.outcome in ("passed", "waived"):
        return "returning (diagnostic passed)"
    return "waiting for diagnostic"


def _waits_for_pod(store: Store, episode: list[ActionRecord]) -> float | None:
    """When a repair of the take-out's incidents last waited for a pod to release the GPU (the
    decision journal's `plan: waits for pod ... to release GPU ...`), if it did."""
    rows = store.audit_of("decision", {f"incident/{a.incident_id}" for a in episode})
    return max((r.at for r in rows if WAITS in str(r.detail.get("reasons"))), default=None)


def _is_mark(a: ActionRecord) -> bool:
    """The diagnostic job's replacement mark (a label on the fence or the node): not a repair."""
    return all(i.op in ("label", "label_device_rule") for i in a.plan) and bool(a.plan)


def out_of_service(store: Store, targets: list[str]) -> list[OutOfService]:
    """Every target's standing, a person's first, then by state and oldest first."""
    rows = [r for r in (one(store, t) for t in targets) if r is not None]
    return sorted(rows, key=lambda r: (STATES.index(r.state), r.since, r.target))
