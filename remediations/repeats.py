"""Repeat history: a fault that comes back after a repair counts against the GPU and its node.

A repair here is what gpufleet did that should have ended a fault and that finished: a GPU
reset, a reboot (or the request for one), a return to service. A hardware incident that opens
within `gates.lemon_window` after such a repair on the GPU (or, for a node, on the node or any
of its GPUs) is a repeat. `gates.lemon_repeats` of them in the window make it a lemon: it is
marked for hardware replacement and a person is told, instead of being reset, rebooted or
returned once more (NVSentinel's remediation loops).
"""

from __future__ import annotations

from remediations.decisions import HARDWARE_FAULTS
from remediations.store import IncidentRecord, Store
from remediations.types import ActionState

REPAIRS = frozenset(
    {"reset_gpu", "reboot_node", "request_reset", "request_reboot", "uncordon", "unfence_gpu"}
)
"""Playbooks whose completion says 'the fault should be over'."""
REPAIRING = frozenset({"reset_gpu", "reboot_node", "request_reset", "request_reboot"})
"""Repairs a lemon does not get again."""


_HARDWARE = frozenset(k.value for k in HARDWARE_FAULTS)


def hardware_incidents(store: Store, target: str, node: str | None) -> list[IncidentRecord]:
    """Hardware incidents (any status, any severity) that speak for `target`: a node's and its
    GPUs' for `node/<n>`; the GPU's own and its node-wide ones for `gpu/<uuid>`."""
    name = node if node is not None else target.removeprefix("node/")
    if node is None and not target.startswith("node/"):
        return []
    found = [i for i in store.incidents_on(name) if i.kind in _HARDWARE]
    if target.startswith("gpu/"):
        uuid = target.removeprefix("gpu/")
        found = [i for i in found if i.gpu_uuid in (None, uuid)]
    return found


def repeats(store: Store, target: str, node: str | None, window: float, now: float) -> int:
    """Hardware incidents on `target` that opened within `window` after a finished repair on it
    (a node's: on the node or any of its GPUs), counting those opened in the last `window`."""
    if node is None:
        if not target.startswith("node/"):
            return 0
        node = target.removeprefix("node/")
    gpu = target.startswith("gpu/")
    fixed = [
        a.updated_at
        for a in store.actions([ActionState.DONE], since=now - 2 * window)
        if a.playbook in REPAIRS
        and node in a.target_nodes
        and (not gpu or a.target in (target, f"node/{node}"))
    ]
    return sum(
        1
        for i in hardware_incidents(store, target, node)
        if now - i.opened_at <= window and any(f < i.opened_at <= f + window for f in fixed)
    )


def lemon(
    store: Store, target: str, node: str | None, window: float, limit: int, now: float
) -> str | None:
    """Why `target` is a lemon (None: it is not)."""
    n = repeats(store, target, node, window, now)
    if n < limit:
        return None
    return (
        f"{target} faulted again {n} times within {window / 3600:.0f}h of a repair (lemon at "
        f"{limit}): marked for hardware replacement instead of being repaired again"
    )
