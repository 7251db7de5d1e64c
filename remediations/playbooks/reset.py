"""reset_gpu: reset one GPU in place with a privileged Job pinned to its node, once it is free.

`nvidia-smi -r` (`--gpu-reset`) refuses while any process holds the device ("Unable to reset
this GPU because it's being used by some other process"), so the playbook plans nothing while a
pod holds the GPU: the incident stays open, the journal says which pod it waits for, and the next
cycle plans again (pair it with `fence_gpu` with effect NoExecute, or a drain, to free it). Once
free it runs `nvidia-smi -r -i <index>` as root (privileged) on the node, and reads the Job's
outcome. Reset needs root and no process on the GPU (persistence-mode daemons and monitoring
agents that open the device, e.g. a DCGM host engine with a watch on it, count too); a GPU that
has fallen off the bus (XID 79) cannot be reset and wants a reboot; on NVSwitch systems (HGX
A100/H100) the Fabric Manager must be running and may require resetting the GPUs of a baseboard
together, which is what the configurable command is for. The Job's name derives from the GPU and
the incident at planning time, and the plan is journaled before the Job is created, so a runner
killed mid-step finds the same Job instead of resetting twice.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from observer.fleet.units import Duration
from remediations.capabilities import ClusterReader, NodeJobReader
from remediations.cluster_names import INDEX_LABEL, REPAIR_LABEL, UUID_LABEL
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
from remediations.types import JOBS_NAMESPACE, Intent, stable_id

FREE_PHASES = frozenset({"Succeeded", "Failed"})
"""Pods in these phases have exited: they hold no GPU."""


def reset_job_name(gpu_uuid: str, incident_id: str, taken_at: float) -> str:
    """A DNS label from the GPU and the planning moment: the same action, the same Job."""
    short = gpu_uuid.lower().removeprefix("gpu-").replace("_", "-")[:18].strip("-")
    return f"gpufleet-reset-{short}-{stable_id(gpu_uuid, incident_id, taken_at)[:8]}"


class ResetParams(BaseParams):
    verify_timeout: Duration = Field(default=600.0, gt=0)
    image: str = Field(default="nvcr.io/nvidia/cuda:12.8.1-base-ubuntu24.04", min_length=1)
    """Must bring `nvidia-smi` (or the command below) and the driver's libraries, e.g. through
    the NVIDIA container runtime."""
    command: list[str] = Field(default_factory=lambda: ["nvidia-smi", "-r", "-i", "{index}"])
    """`{index}` is the GPU's index on the node (`{uuid}` its UUID); nvidia-smi's `-i` also takes
    a UUID, which `{index}` becomes when the index is not known."""
    namespace: str = Field(default=JOBS_NAMESPACE, min_length=1)
    """Where the Job runs (`gpufleet-jobs`: the one namespace gpufleet's Role lets it create
    Jobs in, Pod Security `privileged`; deploy/base's admission policy must list its image and
    command)."""

    @field_validator("command")
    @classmethod
    def _nonempty(cls, v: list[str]) -> list[str]:
        if not v or not v[0]:
            raise ValueError("a command (a list of strings, the first a program)")
        return v


def holder_of(uuid: str, node: str, view: ClusterView) -> str | None:
    """The pod that holds the GPU now, or None. When the view has no GPU -> pod mapping at all
    (the exporters' pod labels are off), any workload pod on the node might hold it."""
    key = view.pod_of_gpu.get(uuid)
    if key is not None:
        for k in (key, *view.sharers_of_gpu.get(uuid, ())):  # every pod on a shared GPU
            pod = view.pods.get(k)
            if pod is None or pod.phase not in FREE_PHASES:
                return k
        return None
    if view.pod_of_gpu:
        return None
    for p in view.pods_on(node):
        if not p.mirror and p.owner_kind != "DaemonSet" and p.phase not in FREE_PHASES:
            return p.key
    return None


class ResetGpu(Playbook):
    name = "reset_gpu"
    disruptive = False
    """Only the GPU, already free of pods, leaves service for seconds; the node stays up."""
    Params = ResetParams

    def plan(self, subject: Subject, view: ClusterView, params: BaseParams) -> Plan | NoPlan:
        assert isinstance(params, ResetParams)
        found = gpu_of(subject, view)
        if isinstance(found, NoPlan):
            return found
        node, uuid = found
        holder = holder_of(uuid, node, view)
        if holder is not None:
            return NoPlan(f"waits for pod {holder} to release GPU {uuid}")
        index = view.gpu_index.get(uuid)
        gpu = str(index) if index is not None else uuid
        command = [c.replace("{index}", gpu).replace("{uuid}", uuid) for c in params.command]
        labels = {REPAIR_LABEL: "reset-gpu", UUID_LABEL: uuid}
        if index is not None:
            labels[INDEX_LABEL] = str(index)
        intent = Intent(
            "run_node_job",
            node,
            {
                "namespace": params.namespace,
                "name": reset_job_name(uuid, subject.incident_id, view.taken_at),
                "image": params.image,
                "command": command,
                "labels": labels,
                "privileged": True,
            },
        )
        return Plan(self.name, f"gpu/{uuid}", (intent,), False, (node,))

    def verify(
        self, intents: tuple[Intent, ...], reader: ClusterReader, params: BaseParams
    ) -> Verification:
        if not isinstance(reader, NodeJobReader):
            return Verification(VerifyStatus.FAILED, "this actuator cannot read Jobs")
        for i in intents:
            if i.op != "run_node_job":
                continue
            ns, name = str(i.args["namespace"]), str(i.args["name"])
            job = reader.node_job(ns, name)
            if job is None:
                return Verification(VerifyStatus.PENDING, f"job {ns}/{name} not found yet")
            if job.outcome is None:
                return Verification(VerifyStatus.PENDING, f"job {ns}/{name}: {job.detail}")
            if job.outcome != "passed":
                return Verification(
                    VerifyStatus.FAILED, f"reset job {ns}/{name} failed: {job.detail}"
                )
        return Verification(VerifyStatus.OK, "GPU reset: the reset job succeeded")
