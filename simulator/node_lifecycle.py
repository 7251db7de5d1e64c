"""Controllers that write node taints beside gpufleet, as on every real cluster.

`spec.taints` is one atomic list several writers share. The node lifecycle controller's
TaintNodesByCondition adds `node.kubernetes.io/unschedulable:NoSchedule` to a cordoned node and
takes it away on uncordon; node-problem-detector and the cluster autoscaler add and remove taints
of their own at any moment. The simulator reproduces both, so a client that rebuilds the list
from an old read and writes it blindly loses a taint here as it would there.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
WRITER_TAINT = "example.com/node-problem"
"""The concurrent writer's taint (a node-problem-detector stand-in)."""


def unschedulable_taints(node: Obj) -> list[Obj] | None:
    """The node's taints with the unschedulable taint matching `spec.unschedulable`, or None
    when they already match."""
    spec = node.get("spec") or {}
    taints: list[Obj] = list(spec.get("taints") or [])
    has = any(t.get("key") == UNSCHEDULABLE_TAINT for t in taints)
    if bool(spec.get("unschedulable")) == has:
        return None
    if has:
        return [t for t in taints if t.get("key") != UNSCHEDULABLE_TAINT]
    return [*taints, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}]


def toggled_writer_taint(node: Obj) -> list[Obj]:
    """The concurrent writer's next write: its taint added if absent, removed if present."""
    taints: list[Obj] = list((node.get("spec") or {}).get("taints") or [])
    if any(t.get("key") == WRITER_TAINT for t in taints):
        return [t for t in taints if t.get("key") != WRITER_TAINT]
    return [*taints, {"key": WRITER_TAINT, "value": "simulated", "effect": "PreferNoSchedule"}]
