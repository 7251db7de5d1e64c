"""Controllers that write node taints beside gpufleet, as on every real cluster.

`spec.taints` is one atomic list several writers share. The node lifecycle controller's
TaintNodesByCondition adds `node.kubernetes.io/unschedulable:NoSchedule` to a cordoned node and
takes it away on uncordon; it taints a node whose Ready condition is False `not-ready` and one
whose condition is Unknown (the kubelet stopped posting) `unreachable`, both NoSchedule and, for
taint-based eviction, NoExecute with `timeAdded`, and removes them when the node is Ready again;
node-problem-detector and the cluster autoscaler add and remove taints
of their own at any moment. The simulator reproduces both, so a client that rebuilds the list
from an old read and writes it blindly loses a taint here as it would there.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
WRITER_TAINT = "example.com/node-problem"
"""The concurrent writer's taint (a node-problem-detector stand-in)."""


NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
CONTROLLER_KEYS = frozenset({UNSCHEDULABLE_TAINT, NOT_READY_TAINT, UNREACHABLE_TAINT})
"""The taints the node lifecycle controller owns: nobody else adds or removes them."""


def _ready(node: Obj) -> str:
    for c in (node.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready":
            return str(c.get("status", "Unknown"))
    return "Unknown"


def wanted_controller_taints(node: Obj) -> set[tuple[str, str]]:
    """(key, effect) of the controller's taints this node should carry now."""
    want: set[tuple[str, str]] = set()
    if (node.get("spec") or {}).get("unschedulable"):
        want.add((UNSCHEDULABLE_TAINT, "NoSchedule"))
    ready = _ready(node)
    if ready != "True":
        key = NOT_READY_TAINT if ready == "False" else UNREACHABLE_TAINT
        want |= {(key, "NoSchedule"), (key, "NoExecute")}
    return want


def lifecycle_taints(node: Obj, now: str) -> list[Obj] | None:
    """The node's taints with the controller's own made to match its spec and Ready condition
    (others' kept as they are, `now` the RFC 3339 `timeAdded` of a new NoExecute taint), or None
    when they already match."""
    taints: list[Obj] = list((node.get("spec") or {}).get("taints") or [])
    want = wanted_controller_taints(node)
    have = {(t.get("key"), t.get("effect")) for t in taints if t.get("key") in CONTROLLER_KEYS}
    if have == want:
        return None
    kept = [
        t
        for t in taints
        if t.get("key") not in CONTROLLER_KEYS or (t.get("key"), t.get("effect")) in want
    ]
    for key, effect in sorted(want - have):
        new: Obj = {"key": key, "effect": effect}
        if effect == "NoExecute":
            new["timeAdded"] = now
        kept.append(new)
    return kept


def toggled_writer_taint(node: Obj) -> list[Obj]:
    """The concurrent writer's next write: its taint added if absent, removed if present."""
    taints: list[Obj] = list((node.get("spec") or {}).get("taints") or [])
    if any(t.get("key") == WRITER_TAINT for t in taints):
        return [t for t in taints if t.get("key") != WRITER_TAINT]
    return [*taints, {"key": WRITER_TAINT, "value": "simulated", "effect": "PreferNoSchedule"}]


def add_default_tolerations(pod: Obj) -> None:
    """The DefaultTolerationSeconds admission plugin: a new pod tolerates `not-ready` and
    `unreachable` NoExecute for 300 s unless it says otherwise."""
    spec = pod.setdefault("spec", {})
    tolerations: list[Obj] = list(spec.get("tolerations") or [])
    for key in (NOT_READY_TAINT, UNREACHABLE_TAINT):
        if not any(
            t.get("key") in (key, None, "") and t.get("effect") in ("NoExecute", None, "")
            for t in tolerations
        ):
            tolerations.append(
                {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            )
    spec["tolerations"] = tolerations
