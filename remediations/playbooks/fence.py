"""fence_gpu and unfence_gpu: take one GPU out of service on a DRA node, leave the other seven.

On clusters where the NVIDIA DRA driver publishes GPUs as `resource.k8s.io` devices, a
DeviceTaintRule owned by gpufleet selects exactly the faulty GPU's device (driver, pool, device,
resolved from the finding's GPU UUID through the node's ResourceSlice when the step is pinned)
and taints it: effect `NoSchedule` keeps new claims off it, `NoExecute` also evicts the pods that
hold it, `None` only records the taint (the API's own dry run). The node stays schedulable. The
rule's name derives from the GPU UUID, so a retry finds it, and undoing deletes only a rule that
carries gpufleet's managed-by label. Under `actuation: shadow` nothing is written at all.
Where the cluster serves no DeviceTaintRules (1.34-1.36 without the DRADeviceTaints gate) the
step is pinned to the pods-on-GPU grain's guard instead (`kube.pinning.fence_fallback`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from pydantic import Field

from remediations.capabilities import ClusterReader, DeviceTaintReader
from remediations.cluster_names import GUARD_OP, fence_rule_name
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
)
from remediations.playbooks.gpu_drain import EvictGpuPods, GpuDrainParams
from remediations.types import (
    DEVICE_TAINTS_NOT_SERVED,
    QUARANTINE_TAINT,
    Intent,
    fence_fallback_reason,
)

NVIDIA_DRIVER = "gpu.nvidia.com"


class FenceParams(BaseParams):
    effect: Literal["None", "NoSchedule", "NoExecute"] = "NoSchedule"
    """`NoSchedule` fences the GPU, `NoExecute` also evicts the pods on it, `None` records the
    taint without effect (a live dry run the scheduler and eviction controller ignore)."""
    driver: str = Field(default=NVIDIA_DRIVER, min_length=1)
    """The DRA driver whose ResourceSlices publish the GPUs."""


class FenceGpu(Playbook):
    name = "fence_gpu"
    disruptive = False
    """The node stays available: only one GPU leaves service (no blast-radius share)."""
    Params = FenceParams

    def plan(self, subject: Subject, view: ClusterView, params: BaseParams) -> Plan | NoPlan:
        assert isinstance(params, FenceParams)
        found = gpu_of(subject, view)
        if isinstance(found, NoPlan):
            return found
        node, uuid = found
        if view.device_taints is False:
            return _pods_on_gpu_grain(subject, view, params)
        intent = Intent(
            "fence_device",
            node,
            {
                "uuid": uuid,
                "driver": params.driver,
                "rule": fence_rule_name(uuid),
                "key": QUARANTINE_TAINT,
                "value": subject.kind,
                "effect": params.effect,
            },
        )
        return Plan(self.name, f"gpu/{uuid}", (intent,), False, (node,))

    def verify(
        self, intents: tuple[Intent, ...], reader: ClusterReader, params: BaseParams
    ) -> Verification:
        if not isinstance(reader, DeviceTaintReader):
            return Verification(VerifyStatus.FAILED, "this actuator cannot read DeviceTaintRules")
        if not any(i.op in ("fence_device", "label_device_rule") for i in intents):
            # the pods-on-GPU grain (no DeviceTaintRules served), planned or pinned so
            guard = next((i for i in intents if i.op == GUARD_OP), None)
            done = EvictGpuPods().verify(_with_holders(intents, guard), reader, GpuDrainParams())
            why = str(guard.args.get("why", "")) if guard is not None else ""
            return replace(done, detail=f"{done.detail}: {why}") if why else done
        for i in intents:
            if i.op == "label_device_rule":
                marked = _verify_labels(i, reader)
                if marked is not None:
                    return marked
                continue
            if i.op != "fence_device":
                continue
            name = str(i.args["rule"])
            rule = reader.device_taint_rule(name)
            if rule is None:
                return Verification(VerifyStatus.PENDING, f"device taint rule {name} not there")
            if not rule.ours:
                return Verification(VerifyStatus.FAILED, f"device taint rule {name} is not ours")
            if rule.effect != i.args["effect"] or rule.key != i.args["key"]:
                return Verification(
                    VerifyStatus.FAILED,
                    f"device taint rule {name} has {rule.key}:{rule.effect}, "
                    f"planned {i.args['key']}:{i.args['effect']}",
                )
            if "device" in i.args and rule.device != i.args["device"]:
                return Verification(
                    VerifyStatus.FAILED, f"device taint rule {name} selects {rule.device}"
                )
        return Verification(VerifyStatus.OK, "GPU fenced by its device taint rule")

    def rollback(self, intents: tuple[Intent, ...]) -> tuple[Intent, ...]:
        return tuple(_unfence(i) for i in intents if i.op == "fence_device")


def _pods_on_gpu_grain(subject: Subject, view: ClusterView, params: FenceParams) -> Plan | NoPlan:
    """Where the cluster serves no DeviceTaintRules: evict_gpu_pods' plan under fence_gpu's name,
    disruptive (it may cordon, so the blast-radius budget counts it). NoSchedule keeps only the
    guard (no pod is evicted), NoExecute also evicts the GPU's pods, a `None` dry run has
    nothing to record."""
    if params.effect == "None":
        return NoPlan(f"{DEVICE_TAINTS_NOT_SERVED}: a dry-run (effect None) fence records nothing")
    planned = EvictGpuPods().plan(subject, view, GpuDrainParams())
    if isinstance(planned, NoPlan):
        return NoPlan(f"{DEVICE_TAINTS_NOT_SERVED}; the pods-on-GPU grain: {planned.reason}")
    why = fence_fallback_reason(params.effect)
    intents = tuple(
        Intent(i.op, i.target, {**i.args, "fallback": why}) if i.op == GUARD_OP else i
        for i in planned.intents
        if params.effect == "NoExecute" or i.op == GUARD_OP
    )
    return replace(
        planned,
        playbook=FenceGpu.name,
        intents=intents,
        disruptive=True,
        namespaces=planned.namespaces if params.effect == "NoExecute" else (),
        priority_classes=planned.priority_classes if params.effect == "NoExecute" else (),
    )


def _with_holders(intents: tuple[Intent, ...], guard: Intent | None) -> tuple[Intent, ...]:
    """The pinned fallback of a NoExecute fence evicts the GPU's pods from its guard step:
    verified (and described) as the grain's `evict_pods` of those pods."""
    pods = list(guard.args.get("pods") or ()) if guard is not None else []
    if guard is None or not pods:
        return intents
    only = [f"{p[0]}/{p[1]}" for p in pods]
    return (*intents, Intent("evict_pods", guard.target, {"pods": pods, "only": only}))


def _verify_labels(i: Intent, reader: DeviceTaintReader) -> Verification | None:
    """A replacement mark on gpufleet's rule (the fence stays): None when the labels are there."""
    rule = reader.device_taint_rule(str(i.args["rule"]))
    if rule is None or not rule.ours:
        return Verification(VerifyStatus.FAILED, f"device taint rule {i.args['rule']} is gone")
    for k, v in dict(i.args["labels"]).items():
        if rule.labels.get(k) != v:
            return Verification(VerifyStatus.PENDING, f"{i.args['rule']} lacks label {k}")
    return None


def _unfence(i: Intent) -> Intent:
    return Intent("unfence_device", i.target, {"rule": i.args["rule"]})


class UnfenceGpu(Playbook):
    """The inverse: delete gpufleet's own DeviceTaintRule for the GPU (never anyone else's)."""

    name = "unfence_gpu"
    Params = FenceParams

    def plan(self, subject: Subject, view: ClusterView, params: BaseParams) -> Plan | NoPlan:
        found = gpu_of(subject, view)
        if isinstance(found, NoPlan):
            return found
        node, uuid = found
        intent = Intent("unfence_device", node, {"rule": fence_rule_name(uuid)})
        return Plan(self.name, f"gpu/{uuid}", (intent,), False, (node,), undo=True)

    def verify(
        self, intents: tuple[Intent, ...], reader: ClusterReader, params: BaseParams
    ) -> Verification:
        if not isinstance(reader, DeviceTaintReader):
            return Verification(VerifyStatus.FAILED, "this actuator cannot read DeviceTaintRules")
        for i in intents:
            rule = reader.device_taint_rule(str(i.args["rule"]))
            if rule is not None and rule.ours:
                return Verification(VerifyStatus.PENDING, f"{i.args['rule']} still present")
        return Verification(VerifyStatus.OK, "gpufleet's device taint rule is gone")
