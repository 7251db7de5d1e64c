"""Judgements on cluster objects that planning and writing must make alike: which pods a drain
may evict, whether a node may stay schedulable around one faulty GPU, which reboots gpufleet
already made.

The playbooks apply them to the cycle's view when they plan; the Kubernetes wing (`kube/`)
applies them again to live objects when it pins a step, so a plan and its write never disagree.
"""

from __future__ import annotations

from remediations.capabilities import RuleView
from remediations.cluster_view import NodeView, PodView
from remediations.types import REBOOTS_ANNOTATION


def evictable(p: PodView, include_unmanaged: bool, skip: frozenset[str] = frozenset()) -> bool:
    if p.mirror or p.owner_kind == "DaemonSet" or p.phase in ("Succeeded", "Failed"):
        return False
    if p.namespace in skip:
        return False
    return include_unmanaged or p.owner_kind is not None


def reboot_times(node: NodeView) -> list[float]:
    """When gpufleet rebooted the node (`gpufleet.io/reboots`, newest last)."""
    raw = node.annotations.get(REBOOTS_ANNOTATION, "")
    out = []
    for part in raw.split(","):
        try:
            out.append(float(part))
        except ValueError:
            continue
    return out


def keep_schedulable(node: NodeView, fence: RuleView | None = None) -> tuple[bool, str]:
    """(may the node stay schedulable, why), from gpufleet's DeviceTaintRule for the GPU on a
    DRA node (`fence`), else the node's live capacity and allocatable GPUs.

    The node object shows counts, not which card was withdrawn: one withdrawn GPU is taken to
    be the faulty one (the XID that raised this incident is the one the plugin saw)."""
    if fence is not None and fence.ours and fence.effect in ("NoSchedule", "NoExecute"):
        return True, (
            f"gpufleet's DeviceTaintRule fences the GPU ({fence.effect}): no new claim gets "
            "it, the node stays schedulable for the others"
        )
    cap, alloc = node.gpu_capacity, node.gpu_allocatable
    if cap is None or alloc is None:
        return False, "the node reports no nvidia.com/gpu capacity: cordoned"
    withdrawn = cap - alloc
    if withdrawn <= 0:
        return False, (
            f"allocatable nvidia.com/gpu {alloc} = capacity {cap}: the device plugin has not "
            "marked the GPU Unhealthy (health checks off, e.g. DP_DISABLE_HEALTHCHECKS, or not "
            "yet seen), so the kubelet could hand it to the next pod: cordoned"
        )
    if withdrawn > 1:
        return False, (
            f"allocatable nvidia.com/gpu {alloc} of capacity {cap}: {withdrawn} GPUs withdrawn, "
            "more than this one is bad (node-level): cordoned"
        )
    return True, (
        f"allocatable nvidia.com/gpu {alloc} of capacity {cap}: the device plugin withdrew "
        f"the faulty GPU, the node stays schedulable for the other {alloc}"
    )
