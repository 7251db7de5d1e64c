"""evict_gpu_pods: the pods-on-GPU grain for device-plugin clusters (no DRA device to taint).

Only the pods holding the faulty GPU (the exporter's pod-to-GPU mapping, `pod_of_gpu`) are
evicted, through the `drain` playbook's policy/v1 machinery (PDBs, back-off inside a timeout,
UIDs pinned and journaled before the write); the other pods on the node keep running. A pod
of the same name created after the mapping was seen (`held_at`: a replacement while the action
awaited approval, on which GPU nobody knows yet) fails the action instead: no guess is evicted.

Whether the node stays schedulable is decided at the write, from the live node. On a DRA node
a gpufleet DeviceTaintRule fencing the GPU (`fence_gpu`) keeps it from new claims. Otherwise
only the NVIDIA device plugin can keep a card from the next pod: it marks a GPU Unhealthy on a
critical XID (every XID but the application ones 13, 31, 43, 45, 68, 109, unless
`DP_DISABLE_HEALTHCHECKS` says otherwise) and the node's allocatable `nvidia.com/gpu` drops
below its capacity. Exactly one GPU withdrawn: the kubelet hands that card to no one, the node
stays schedulable for the rest. None withdrawn (health checks off, the plugin restarted and
forgot, not yet seen) or several (more than this GPU is bad: a node-level fault): cordon, and
the journal says why. Node-level kinds (`gpu_lost`: XID 79, the GPU fell off the bus and the
node needs a reboot) get no plan here: that is `drain`'s grain.
"""

from __future__ import annotations

from remediations.capabilities import ClusterReader
from remediations.cluster_names import GUARD_OP
from remediations.cluster_rules import evictable
from remediations.cluster_view import ClusterView
from remediations.playbooks.base import (
    BaseParams,
    NoPlan,
    Plan,
    Playbook,
    Subject,
    Verification,
    VerifyStatus,
    gpu_of,
    guard_unverified,
)
from remediations.playbooks.drain import DrainParams, drain_verify, evict_args
from remediations.types import Intent

NODE_LEVEL_KINDS = frozenset({"gpu_lost", "monitoring_gap"})
"""Kinds this grain refuses: the whole node is suspect (XID 79 class), or nothing is known."""
NODE_LEVEL_ACTIONS = frozenset({"RESTART_BM", "RESTART_VM"})
"""NVIDIA's catalog actions that restart the machine (XID 79 fallen off the bus, 151): the
node is the grain, not one GPU."""


class GpuDrainParams(DrainParams):
    keep_schedulable: bool = True
    """Leave the node schedulable for its other GPUs when the device plugin has withdrawn the
    faulty one (allocatable = capacity - 1); False: always cordon, as `drain` does."""


class EvictGpuPods(Playbook):
    name = "evict_gpu_pods"
    disruptive = True
    """It may cordon (decided at the write), so it counts toward the blast radius."""
    Params = GpuDrainParams

    def plan(self, subject: Subject, view: ClusterView, params: BaseParams) -> Plan | NoPlan:
        assert isinstance(params, GpuDrainParams)
        found = gpu_of(subject, view)
        if isinstance(found, NoPlan):
            return found
        node, uuid = found
        if subject.kind in NODE_LEVEL_KINDS:
            return NoPlan(f"{subject.kind} is a node-level fault: drain the node instead")
        action = str(subject.evidence.get("nvidia_action") or "")
        if action in NODE_LEVEL_ACTIONS:
            return NoPlan(
                f"XID {subject.evidence.get('xid')} calls for {action} (the whole machine): "
                "drain the node instead"
            )
        skip = frozenset(params.skip_namespaces)
        holders = [view.pod_of_gpu.get(uuid, ""), *view.sharers_of_gpu.get(uuid, ())]
        pods = [
            p
            for p in (view.pods.get(k) for k in holders)  # every pod on a time-sliced GPU
            if p is not None and p.node == node and evictable(p, params.include_unmanaged, skip)
        ]
        evicted = {p.key for p in pods}
        sharing = {k for keys in view.sharers_of_gpu.values() for k in keys}
        held = (set(view.pod_of_gpu.values()) | sharing) - evicted
        kept_pods = sorted(p.key for p in view.pods_on(node) if p.key in held)
        in_service = sorted(u for u in view.gpus_of_node.get(node, ()) if u != uuid)
        guard = (
            Intent(GUARD_OP, node, {"gpu": uuid})
            if params.keep_schedulable
            else Intent("cordon", node)
        )
        intents = [guard]
        if pods:
            args = {
                **evict_args(params),
                "only": [p.key for p in pods],
                "gpu": uuid,
                "gpus_in_service": in_service,
                "pods_kept": kept_pods,
                "held_at": view.taken_at or None,
            }
            intents.append(Intent("evict_pods", node, args))
        return Plan(
            self.name,
            f"gpu/{uuid}",
            tuple(intents),
            True,
            (node,),
            namespaces=tuple(sorted({p.namespace for p in pods})),
            priority_classes=tuple(sorted({p.priority_class for p in pods if p.priority_class})),
        )

    def verify(
        self, intents: tuple[Intent, ...], reader: ClusterReader, params: BaseParams
    ) -> Verification:
        for i in intents:
            guard = guard_unverified(i, reader)
            if guard is not None:
                return guard
        v = drain_verify(intents, reader)
        if v.status is not VerifyStatus.OK:
            return v
        return Verification(VerifyStatus.OK, _outcome(intents))

    # No rollback: a cordon this playbook made keeps the faulty GPU from the next pod; undoing
    # it after a failed eviction would hand the card out again (`drain` keeps its cordon too).


def _outcome(intents: tuple[Intent, ...]) -> str:
    """What stays in service, for the action's result (`gpufleet actions`, the dashboard)."""
    guard = next((i for i in intents if i.op == GUARD_OP), None)
    evict = next((i for i in intents if i.op == "evict_pods"), None)
    cordoned = guard is None or bool(guard.args.get("cordon", True))
    if evict is None:
        return "no pod held the GPU; node " + ("cordoned" if cordoned else "schedulable")
    only = ", ".join(evict.args.get("only") or ())
    pods = ", ".join(evict.args.get("pods_kept") or ()) or "none"
    if cordoned:
        return f"evicted {only}; node cordoned: only the GPUs of the pods kept ({pods}) stay in use"
    kept = len(evict.args.get("gpus_in_service") or ())
    return f"evicted {only}; node schedulable: the other {kept} GPUs stay in service ({pods} kept)"
