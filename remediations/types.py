"""The remediation vocabulary shared by incidents, policy, gates, playbooks, engine and store.

Kept in one small module so that every stage speaks the same ids, states and intents, and so the
store can persist them without importing the stages that produce them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NewType

IncidentId = NewType("IncidentId", str)
ActionId = NewType("ActionId", str)
ClusterName = NewType("ClusterName", str)

ACTOR = "gpufleet"
JOBS_NAMESPACE = "gpufleet-jobs"
"""Where gpufleet's privileged node Jobs (diagnostics, resets, reboot requests) run: a namespace
of their own (Pod Security `privileged`, an admission policy pinning their image and command,
the only namespace gpufleet may create Jobs in), apart from gpufleet's own `restricted` one."""
"""Who we are in every annotation, audit row and field manager."""
ANNOTATION_PREFIX = "gpufleet.io/"
OWNER_ANNOTATION = "gpufleet.io/cordoned-by"
"""Set on every node gpufleet cordons; `uncordon` undoes only nodes carrying it (#1424)."""
QUARANTINE_TAINT = "gpufleet.io/quarantine"
DEVICE_TAINTS_NOT_SERVED = (
    "single-GPU fencing needs a cluster that serves DeviceTaintRules (Kubernetes 1.37, or "
    "1.34-1.36 with the DRADeviceTaints feature gate and resource.k8s.io/v1alpha3 or v1beta2 "
    "runtime-config on)"
)
"""What doctor, the log and a fence_gpu that falls back to the pods-on-GPU grain say."""
FENCE_FALLBACK = f"{DEVICE_TAINTS_NOT_SERVED}: fence_gpu fell back to the pods-on-GPU grain"
"""The reason a fence_gpu plan or step carries when it is the pods-on-GPU grain instead."""


def fence_fallback_reason(effect: str) -> str:
    """What the pods-on-GPU fallback does for a fence of `effect`, for plan, log and doctor."""
    if effect == "NoExecute":
        return (
            f"{FENCE_FALLBACK}; NoExecute: the node is cordoned (unless the device plugin withdrew "
            "the GPU) and the pods holding the GPU are evicted"
        )
    return (
        f"{FENCE_FALLBACK}; {effect}: the node is cordoned (unless the device plugin withdrew "
        "the GPU), no pod is evicted"
    )


QUARANTINE_LABEL = "gpufleet.io/quarantined"
REASON_ANNOTATION = "gpufleet.io/reason"
INCIDENT_ANNOTATION = "gpufleet.io/incident"
ACTION_ANNOTATION = "gpufleet.io/action"
REQUEST_ANNOTATION = "gpufleet.io/requested"
"""`request_reset` / `request_reboot` leave `<what>:<action id>` here for a node agent or person."""
REBOOT_ANNOTATION = "gpufleet.io/reboot-required"
"""`reboot_node`'s sentinel for the node's reboot daemon: `<action id>:<boot id>`, where the boot
id is the node's `status.nodeInfo.bootID` when the reboot was asked. The daemon reboots while the
value's boot id is the running one; after the reboot it is not, so a marker left behind can never
cause a second reboot. gpufleet removes it once the node is back; while present it holds one of
`max_concurrent` reboot slots."""
REBOOTS_ANNOTATION = "gpufleet.io/reboots"
"""Unix times (comma separated, newest last) of reboots gpufleet completed on the node: the
reboot-loop guard counts them, so it survives a lost journal or a second gpufleet."""


class ActionState(StrEnum):
    PROPOSED = "proposed"
    AWAITING_APPROVAL = "awaiting_approval"
    APPROVED = "approved"
    EXECUTING = "executing"
    VERIFYING = "verifying"
    DONE = "done"
    FAILED = "failed"
    ROLLED_BACK = "rolled_back"
    EXPIRED = "expired"
    REJECTED = "rejected"
    DENIED = "denied"
    SHADOW = "shadow"
    """Decided under `actuation: shadow`: journaled with what gpufleet would have done (its
    `result` reads `shadow: would ...`), never executed, never offered for approval."""

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset(
    {
        ActionState.DONE,
        ActionState.FAILED,
        ActionState.ROLLED_BACK,
        ActionState.EXPIRED,
        ActionState.REJECTED,
        ActionState.DENIED,
        ActionState.SHADOW,
    }
)

TRANSITIONS: Mapping[ActionState, frozenset[ActionState]] = {
    ActionState.PROPOSED: frozenset(
        {
            ActionState.AWAITING_APPROVAL,
            ActionState.APPROVED,
            ActionState.DENIED,
            ActionState.EXPIRED,
        }
    ),
    ActionState.AWAITING_APPROVAL: frozenset(
        {ActionState.APPROVED, ActionState.REJECTED, ActionState.EXPIRED}
    ),
    ActionState.APPROVED: frozenset({ActionState.EXECUTING, ActionState.EXPIRED}),
    ActionState.EXECUTING: frozenset(
        {ActionState.VERIFYING, ActionState.FAILED, ActionState.ROLLED_BACK}
    ),
    ActionState.VERIFYING: frozenset(
        {ActionState.DONE, ActionState.FAILED, ActionState.ROLLED_BACK}
    ),
}
"""The journal's state machine; the store refuses any other move."""


def can_transition(src: ActionState, dst: ActionState) -> bool:
    return dst in TRANSITIONS.get(src, frozenset())


class Mode(StrEnum):
    AUTO = "auto"
    APPROVAL = "approval"
    NOTIFY = "notify"


class Actuation(StrEnum):
    """Whether a rule's decisions reach Kubernetes (`live`) or are only journaled (`shadow`)."""

    SHADOW = "shadow"
    LIVE = "live"


class Verdict(StrEnum):
    EXECUTE = "execute"
    AWAIT_APPROVAL = "await_approval"
    DENY = "deny"


class IncidentStatus(StrEnum):
    OPEN = "open"
    RESOLVED = "resolved"


@dataclass(frozen=True, slots=True)
class Intent:
    """One idempotent Kubernetes operation a playbook wants; only the actuator carries it out.

    `op` names the operation (cordon, uncordon, taint, untaint, label, annotate, evict_pods,
    delete_pod, wait_pods_gone, ...); `args` are JSON-safe so the journal can store the plan and
    a restarted engine can resume at the step it was killed in.
    """

    op: str
    target: str
    args: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "target": self.target, "args": dict(self.args)}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Intent:
        return Intent(str(data["op"]), str(data["target"]), dict(data.get("args") or {}))


def stable_id(*parts: object) -> str:
    """A short deterministic id, so a replayed input maps to the same row (idempotency)."""
    raw = "\x1f".join("" if p is None else str(p) for p in parts)
    return hashlib.blake2b(raw.encode(), digest_size=12).hexdigest()


def action_id(cluster: str, idempotency_key: str) -> str:
    """The journal id of the action with this idempotency key (the store and `decide` agree)."""
    return stable_id(cluster, idempotency_key)
