"""The one module that writes to Kubernetes (through the `kubernetes` client).

It carries out pinned intents for the runner, which has journaled each one before calling
`apply`. Every node write carries `gpufleet.io/action`, `gpufleet.io/incident`, `gpufleet.io/reason`
and `gpufleet.io/by` annotations; evictions carry them on the Eviction object; pod deletions are
recorded as Events with the same facts. Every intent is idempotent: deletes and evictions carry
the pinned pod UID as a precondition, node patches check the current state first, so re-applying
after a crash never acts twice. Drains evict through policy/v1 (PDB 429 -> back off and retry,
always inside the overall timeout, kubectl #172) and never touch DaemonSet or mirror pods.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from errors import PermanentError, TemporaryError
from kube.dra import GPU_LABEL, DraClient, DraDevice, TaintRuleView
from kube.jobs import JobStatus, KubeNodeJobs, api_client
from kube.taints import Taint, patch_taints, same
from observer.snapshot.job_identity import DEFAULT_JOB_LABEL_KEYS
from remediations.actuator_api import FencedGpu, WriteContext
from remediations.cluster_view import GPU_COUNT_LABEL, ClusterView, NodeView, PodView
from remediations.playbooks.base import GUARD_OP
from remediations.playbooks.drain import evictable
from remediations.playbooks.fence import fence_rule_name
from remediations.playbooks.gpu_drain import keep_schedulable
from remediations.playbooks.reboot import KEEP_REBOOTS, marker_boot_id, reboot_times
from remediations.playbooks.reset import UUID_LABEL
from remediations.types import (
    ACTION_ANNOTATION,
    FENCE_FALLBACK,
    INCIDENT_ANNOTATION,
    OWNER_ANNOTATION,
    REASON_ANNOTATION,
    REBOOT_ANNOTATION,
    REBOOTS_ANNOTATION,
    Intent,
    fence_fallback_reason,
)

log = logging.getLogger(__name__)
BY_ANNOTATION = "gpufleet.io/by"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


MULTIPLE_PDBS = "more than one PodDisruptionBudget"
EVICTED, GONE, BLOCKED = "evicted", "gone", "blocked"
"""What one eviction call found: ours, another's doing already, or refused by a PDB."""
"""The eviction API's 500 for a pod that several budgets select: permanent until a person
removes the overlap (pkg/registry/core/pod/storage/eviction.go)."""


def _ctx_annotations(ctx: WriteContext) -> dict[str, str]:
    return {
        ACTION_ANNOTATION: ctx.action_id,
        INCIDENT_ANNOTATION: ctx.incident_id,
        REASON_ANNOTATION: f"{ctx.playbook}: {ctx.reason}"[:250],
        BY_ANNOTATION: ctx.actor,
    }


def _error(exc: Exception, what: str) -> Exception:
    """Map a client error to the runner's vocabulary: temporary (retry) or permanent."""
    if isinstance(exc, ApiException):
        if exc.status in (None, 0, 409, 429) or (exc.status or 0) >= 500:
            return TemporaryError(f"{what}: HTTP {exc.status} {exc.reason}")
        return PermanentError(f"{what}: HTTP {exc.status} {exc.reason}")
    return TemporaryError(f"{what}: {exc}")


def fence_fallback(intent: Intent) -> Intent:
    """fence_device where the cluster serves no DeviceTaintRules: the pods-on-GPU grain's guard
    instead (cordon unless the device plugin withdrew the GPU, decided when pinned), journaled
    with what it does; NoExecute also evicts the GPU's pods (`evict_holders`, found when
    pinned); an effect `None` dry run writes nothing."""
    a = intent.args
    effect = str(a.get("effect") or "NoSchedule")
    args: dict[str, Any] = {"gpu": str(a["uuid"]), "fallback": fence_fallback_reason(effect)}
    if effect == "None":
        args.update(cordon=False, why=f"{FENCE_FALLBACK}; effect None (a dry run): nothing written")
    elif effect == "NoExecute":
        args["evict_holders"] = True
    return Intent(GUARD_OP, intent.target, args)


def _job_of(namespace: str, labels: Mapping[str, str]) -> str | None:
    for key in DEFAULT_JOB_LABEL_KEYS:
        if key in labels:
            return f"{namespace}/{labels[key]}"
    return None


def pod_view(p: Any) -> PodView:
    meta, spec = p.metadata, p.spec
    owner = next((o for o in meta.owner_references or () if o.controller), None)
    if owner is None and meta.owner_references:
        owner = meta.owner_references[0]
    labels = dict(meta.labels or {})
    phase = p.status.phase if p.status is not None else "Unknown"
    return PodView(
        namespace=meta.namespace,
        name=meta.name,
        node=spec.node_name,
        uid=meta.uid,
        phase="Terminating" if meta.deletion_timestamp is not None else (phase or "Unknown"),
        labels=labels,
        owner_kind=owner.kind if owner else None,
        owner_name=owner.name if owner else None,
        priority_class=spec.priority_class_name,
        mirror=MIRROR_ANNOTATION in (meta.annotations or {}),
        job=_job_of(meta.namespace, labels),
        created=meta.creation_timestamp.timestamp() if meta.creation_timestamp else None,
    )


def _count(resources: Mapping[str, Any], name: str) -> int | None:
    v = str(resources.get(name, ""))
    return int(v) if v.isdigit() else None


def node_view(n: Any) -> NodeView:
    meta = n.metadata
    labels = dict(meta.labels or {})
    alloc = (n.status.allocatable or {}) if n.status is not None else {}
    cap = (n.status.capacity or {}) if n.status is not None else {}
    gpus = str(alloc.get("nvidia.com/gpu") or labels.get(GPU_COUNT_LABEL) or "0")
    conds = {c.type: c.status for c in (n.status.conditions or ())} if n.status else {}
    return NodeView(
        name=meta.name,
        labels=labels,
        annotations=dict(meta.annotations or {}),
        taints=tuple((t.key, t.value or "", t.effect) for t in n.spec.taints or ()),
        unschedulable=bool(n.spec.unschedulable),
        gpu_count=int(gpus) if gpus.isdigit() else 0,
        ready=conds.get("Ready", "Unknown") == "True",
        boot_id=(n.status.node_info.boot_id or "") if n.status and n.status.node_info else "",
        gpu_capacity=_count(cap, "nvidia.com/gpu"),
        gpu_allocatable=_count(alloc, "nvidia.com/gpu"),
    )


class KubeActuator:
    """Actuator and ClusterReader over a `kubernetes.client.ApiClient`."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.dra = DraClient(api)
        self.jobs = KubeNodeJobs(api)
        self.clock = clock
        self.sleep = sleep

    @classmethod
    def from_kubeconfig(cls, path: str | Path | None = None, **kw: Any) -> KubeActuator:
        return cls(api_client(path), **kw)

    def close(self) -> None:
        self.api.close()  # type: ignore[no-untyped-call]

    # ---- reads (ClusterReader) ----------------------------------------------------------------

    def node(self, name: str) -> NodeView | None:
        try:
            return node_view(self.core.read_node(name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _error(exc, f"read node {name}") from exc

    def pods_on_node(self, name: str) -> Sequence[PodView]:
        try:
            pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}")
        except (ApiException, HTTPError) as exc:
            raise _error(exc, f"list pods on {name}") from exc
        return [pod_view(p) for p in pods.items]

    def pods_selected(self, namespace: str, selector: str) -> Sequence[PodView]:
        try:
            pods = self.core.list_namespaced_pod(namespace, label_selector=selector)
        except (ApiException, HTTPError) as exc:
            raise _error(exc, f"list pods {namespace} {selector}") from exc
        return [pod_view(p) for p in pods.items]

    def pod(self, namespace: str, name: str) -> PodView | None:
        try:
            return pod_view(self.core.read_namespaced_pod(name, namespace))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _error(exc, f"read pod {namespace}/{name}") from exc

    def device_taint_rule(self, name: str) -> TaintRuleView | None:
        """A DeviceTaintRule by name (None: absent), for the fence_gpu playbook's verification."""
        try:
            return self.dra.rule(name)
        except (ApiException, HTTPError) as exc:
            raise _error(exc, f"read device taint rule {name}") from exc

    def node_job(self, namespace: str, name: str) -> JobStatus | None:
        """A repair Job's outcome (None: no such Job), for reset_gpu's verification; a failed
        one says what its container said (its pod's termination message)."""
        return self.jobs.status(namespace, name)

    def fenced_gpus(self) -> list[FencedGpu]:
        """The GPUs gpufleet's own DeviceTaintRules fence, with node, index and UUID (a rule
        whose device no ResourceSlice publishes any more is left out)."""
        try:
            out = []
            holders: dict[tuple[str, str, str], tuple[str, ...]] | None = None
            for r in self.dra.our_rules():
                if r.driver is None or r.pool is None or r.device is None:
                    continue
                found = self.dra.device_info(r.driver, r.pool, r.device)
                if found is not None:
                    if holders is None:  # one claims list per call, only when something is fenced
                        holders = self.dra.device_holders() or {}
                    node, index, uuid = found
                    out.append(
                        FencedGpu(
                            r.name,
                            node,
                            index,
                            uuid,
                            r.effect,
                            dict(r.labels),
                            dict(r.annotations),
                            holders.get((r.driver, r.pool, r.device), ()),
                        )
                    )
            return out
        except ApiException as exc:
            if exc.status == 404:
                return []  # no resource.k8s.io/v1 DeviceTaintRules here: nothing fenced
            raise _error(exc, "list gpufleet's device taint rules") from exc
        except HTTPError as exc:
            raise _error(exc, "list gpufleet's device taint rules") from exc

    def cluster_view(self, taken_at: float = 0.0) -> ClusterView:
        """Nodes, pods and jobs from the live API (jobs by the operators' job-name labels)."""
        try:
            nodes = [node_view(n) for n in self.core.list_node().items]
            pods = [pod_view(p) for p in self.core.list_pod_for_all_namespaces().items]
        except (ApiException, HTTPError) as exc:
            raise _error(exc, "list nodes and pods") from exc
        return ClusterView.from_objects(
            nodes,
            pods,
            DEFAULT_JOB_LABEL_KEYS,
            taken_at=taken_at,
            device_taints=self.device_taints_served(),
        )

    def device_taints_served(self) -> bool | None:
        """Whether DeviceTaintRules are served (discovered once; None: discovery failed, and
        fence_gpu plans as if they were, its step then pinned to the fallback if not)."""
        try:
            return self.dra.rule_version() is not None
        except (ApiException, HTTPError) as exc:
            log.warning("DeviceTaintRule discovery failed: %s", exc)
            return None

    # ---- pinning -------------------------------------------------------------------------------

    def pin(self, intent: Intent) -> Intent:
        a = dict(intent.args)
        if intent.op == "delete_pod" and not a.get("uid"):
            ns, name = intent.target.split("/", 1)
            p = self.pod(ns, name)
            a["uid"] = p.uid if p is not None else None
        elif intent.op == "delete_pods":
            uids = list(a.get("uids") or [None] * len(a["names"]))
            for i, name in enumerate(a["names"]):
                if not uids[i]:
                    p = self.pod(intent.target, name)
                    uids[i] = p.uid if p is not None else None
            a["uids"] = uids
        elif intent.op == "evict_pods" and "pods" not in a:
            skip = frozenset(a.get("skip_namespaces") or ())
            job, only = a.get("job"), a.get("only")
            pods = [
                p
                for p in self.pods_on_node(intent.target)
                if evictable(p, bool(a.get("include_unmanaged")), skip)
                and (not job or p.job == job)
                and (only is None or p.key in only)
            ]
            seen = a.get("held_at")  # a pod created since is a replacement, not the holder
            newer = [p.key for p in pods if seen and p.created is not None and p.created > seen]
            if newer:
                raise PermanentError(
                    f"{', '.join(newer)} was replaced since the GPU's holder was seen: the new "
                    "pod may not hold the GPU, so it is not evicted; decide again on fresh data"
                )
            a["pods"] = [[p.namespace, p.name, p.uid] for p in pods]
        elif intent.op == GUARD_OP and "cordon" not in a:
            node = self._read_node(intent.target)
            keep, why = keep_schedulable(
                node, self.device_taint_rule(fence_rule_name(str(a["gpu"])))
            )
            a.update(
                cordon=not keep,
                why=f"{a['fallback']}; {why}" if a.get("fallback") else why,
                capacity=node.gpu_capacity,
                allocatable=node.gpu_allocatable,
            )
            if a.get("evict_holders"):
                a["pods"], note = self._gpu_holders(intent.target, str(a["gpu"]))
                a["why"] = f"{a['why']}; {note}"
        elif intent.op == "fence_device" and "device" not in a:
            if self._rule_version() is None:
                return self.pin(fence_fallback(intent))
            self._pin_device(intent.target, a)
        elif intent.op == "run_node_job" and UUID_LABEL in (a.get("labels") or {}):
            a["claims"] = self._claims_free(intent.target, str(a["labels"][UUID_LABEL]))
        elif intent.op == "mark_reboot" and "boot_id" not in a:
            a["boot_id"] = self._read_node(intent.target).boot_id
        return Intent(intent.op, intent.target, a)

    def _rule_version(self) -> str | None:
        try:
            return self.dra.rule_version()
        except (ApiException, HTTPError) as exc:
            raise _error(exc, "discover the DeviceTaintRule API") from exc

    def _gpu_holders(self, node: str, uuid: str) -> tuple[list[list[str]], str]:
        """The evictable pods whose ResourceClaims hold the GPU, as `evict_pods` takes them,
        and what was found. Pods that cannot be told are never guessed: none, and a person is
        told."""
        try:
            dev = self.dra.find_device(node, uuid)
            holders = self.dra.device_holders() if dev is not None else None
        except (ApiException, HTTPError) as exc:
            raise _error(exc, f"read the ResourceClaims of GPU {uuid}") from exc
        if dev is None or holders is None:
            return [], (
                f"the pods holding GPU {uuid} cannot be told here (no DRA claims): none evicted, "
                "a person decides"
            )
        pods = []
        for key in holders.get((dev.driver, dev.pool, dev.device), ()):
            ns, _, name = key.partition("/")
            p = self.pod(ns, name) if name and " " not in key else None
            if p is not None and p.uid and p.node == node and evictable(p, False):
                pods.append([p.namespace, p.name, p.uid])
        names = ", ".join(f"{ns}/{n}" for ns, n, _ in pods) or "none"
        return pods, f"pods holding the GPU to evict: {names}"

    def _claims_free(self, node: str, uuid: str) -> str:
        """Right before a GPU's repair Job: no ResourceClaim may reserve its DRA device (the
        exporter's pod attribution, which planned the repair, can miss a DRA pod). Held: a
        temporary error, so the step is pinned again next pass; checked or not, says which."""
        try:
            dev = self.dra.find_device(node, uuid)
            holders = self.dra.device_holders() if dev is not None else None
        except ApiException as exc:
            if exc.status == 404:
                return "not checked: no resource.k8s.io/v1 on this cluster"
            raise _error(exc, f"read the ResourceClaims of GPU {uuid}") from exc
        except HTTPError as exc:
            raise _error(exc, f"read the ResourceClaims of GPU {uuid}") from exc
        if dev is None:
            return f"not checked: GPU {uuid} is no DRA device on {node}"
        if holders is None:
            return "not checked: the cluster serves no ResourceClaims"
        held = holders.get((dev.driver, dev.pool, dev.device))
        if held:
            raise TemporaryError(
                f"GPU {uuid} ({dev.driver}/{dev.pool}/{dev.device}) is reserved by a ResourceClaim "
                f"for {', '.join(held)}: waits until it is released"
            )
        return f"free: no ResourceClaim reserves {dev.driver}/{dev.pool}/{dev.device}"

    def _pin_device(self, node: str, a: dict[str, Any]) -> None:
        """Resolve the GPU's UUID to its DRA device (driver, pool, device) before journaling."""
        try:
            dev = self.dra.find_device(
                node, str(a["uuid"]), str(a.get("driver") or "gpu.nvidia.com")
            )
        except (ApiException, HTTPError) as exc:
            raise _error(exc, f"list resource slices of {node}") from exc
        if dev is None:
            raise PermanentError(
                f"no ResourceSlice of driver {a.get('driver') or 'gpu.nvidia.com'} on node {node} "
                f"has a device with uuid {a['uuid']}: not a DRA GPU, cannot fence it alone"
            )
        a.update(driver=dev.driver, pool=dev.pool, device=dev.device)

    # ---- writes --------------------------------------------------------------------------------

    def apply(self, intent: Intent, ctx: WriteContext) -> str:
        handler = getattr(self, f"_op_{intent.op}", None)
        if handler is None:
            raise PermanentError(f"unknown intent {intent.op}")
        try:
            return str(handler(intent.target, intent.args, ctx))
        except (ApiException, HTTPError) as exc:
            raise _error(exc, f"{intent.op} {intent.target}") from exc

    def _read_node(self, name: str) -> NodeView:
        node = self.node(name)
        if node is None:
            raise PermanentError(f"node {name} does not exist")
        return node

    def _patch_node(self, name: str, body: dict[str, Any], ctx: WriteContext) -> None:
        meta = body.setdefault("metadata", {})
        meta.setdefault("annotations", {}).update(_ctx_annotations(ctx))
        self.core.patch_node(name, body)

    def _op_cordon(self, name: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        node = self._read_node(name)
        if node.unschedulable:
            return "already ours" if node.cordoned_by_us else "cordoned by someone else; not ours"
        self._patch_node(
            name,
            {
                "spec": {"unschedulable": True},
                "metadata": {"annotations": {OWNER_ANNOTATION: ctx.actor}},
            },
            ctx,
        )
        return "cordoned"

    def _op_cordon_unless_withdrawn(
        self, name: str, a: Mapping[str, Any], ctx: WriteContext
    ) -> str:
        """The pods-on-GPU grain's guard: the pinned verdict (journaled) says cordon or not."""
        if "cordon" not in a:
            raise PermanentError("cordon_unless_withdrawn was not pinned to the live node")
        out = (
            f"{self._op_cordon(name, a, ctx)}: {a['why']}"
            if a["cordon"]
            else f"left schedulable: {a['why']}"
        )
        if a.get("pods"):  # a NoExecute fence's fallback: the GPU's pods leave too
            out += "; " + self._op_evict_pods(name, {"pods": a["pods"]}, ctx)
        return out

    def _op_uncordon(self, name: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        node = self._read_node(name)
        if a.get("only_if_ours", True) and not node.cordoned_by_us:
            return "not cordoned by gpufleet: left alone"
        if not node.unschedulable and OWNER_ANNOTATION not in node.annotations:
            return "already schedulable"
        self._patch_node(
            name,
            {
                "spec": {"unschedulable": False},
                "metadata": {"annotations": {OWNER_ANNOTATION: None}},
            },
            ctx,
        )
        return "uncordoned"

    def _op_taint(self, name: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        key, value, effect = str(a["key"]), str(a["value"]), str(a["effect"])

        def add(current: list[Taint]) -> list[Taint] | None:
            if any(same(t, key, effect) and t.get("value") == value for t in current):
                return None
            keep = [t for t in current if not same(t, key, effect)]
            return [*keep, {"key": key, "value": value, "effect": effect}]

        if not patch_taints(self.core, name, add, _ctx_annotations(ctx)):
            return "taint already present"
        return f"tainted {key}={value}:{effect}"

    def _op_untaint(self, name: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        key = str(a["key"])

        def remove(current: list[Taint]) -> list[Taint] | None:
            keep = [t for t in current if not same(t, key)]
            return None if len(keep) == len(current) else keep

        if not patch_taints(self.core, name, remove, _ctx_annotations(ctx)):
            return "taint already absent"
        return f"removed taint {key}"

    def _op_fence_device(self, node: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        if "device" not in a:
            raise PermanentError("fence_device was not pinned to a DRA device")
        dev = DraDevice(str(a["driver"]), str(a["pool"]), str(a["device"]), node)
        taint = (str(a["key"]), str(a["value"]), str(a["effect"]))
        labels = {GPU_LABEL: str(a["uuid"]).lower()[:63]}
        name = str(a["rule"])
        if not self.dra.create_rule(name, dev, taint, labels, _ctx_annotations(ctx)):
            have = self.dra.rule(name)
            if have is None:
                raise TemporaryError(f"device taint rule {name} vanished while creating it")
            if not have.ours:
                raise PermanentError(f"device taint rule {name} exists and is not gpufleet's")
            if have.device != dev.device or have.pool != dev.pool:
                raise PermanentError(
                    f"device taint rule {name} selects {have.pool}/{have.device}, "
                    f"not {dev.pool}/{dev.device}"
                )
            if (have.key, have.value, have.effect) == taint:
                return f"device taint rule {name} already present ({have.effect})"
            self.dra.set_taint(name, taint, _ctx_annotations(ctx))
            return f"device taint rule {name}: effect {have.effect} -> {taint[2]}"
        return f"created device taint rule {name}: {dev.driver}/{dev.pool}/{dev.device} {taint[2]}"

    def _op_unfence_device(self, node: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        return self.dra.delete_rule(str(a["rule"]))

    def _op_label_device_rule(self, node: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        name = str(a["rule"])
        have = self.dra.rule(name)
        if have is None or not have.ours:
            raise PermanentError(f"device taint rule {name} is absent or not gpufleet's")
        self.dra.set_labels(name, dict(a["labels"]))
        return f"labelled device taint rule {name} {sorted(a['labels'])}"

    def _op_label(self, name: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        self._patch_node(name, {"metadata": {"labels": dict(a["labels"])}}, ctx)
        return f"labelled {sorted(a['labels'])}"

    def _op_unlabel(self, name: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        self._patch_node(name, {"metadata": {"labels": {k: None for k in a["keys"]}}}, ctx)
        return f"unlabelled {list(a['keys'])}"

    def _op_annotate(self, name: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        self._patch_node(name, {"metadata": {"annotations": dict(a["annotations"])}}, ctx)
        return f"annotated {sorted(a['annotations'])}"

    # ---- repair Jobs and reboots (reset_gpu, reboot_node) ----------------------------------------

    def _op_run_node_job(self, node: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        ns, name = str(a["namespace"]), str(a["name"])
        did = self.jobs.ensure(
            ns,
            node,
            name,
            str(a["image"]),
            [str(c) for c in a["command"]],
            {**dict(a.get("labels") or {}), ACTION_ANNOTATION: ctx.action_id},
            container="repair",
            privileged=bool(a.get("privileged")),
            host_path=a.get("host_path"),
        )
        owner = (
            (self.jobs.labels(ns, name) or {}).get(ACTION_ANNOTATION) if did == "exists" else None
        )
        if owner is not None and owner != ctx.action_id:
            raise PermanentError(f"job {ns}/{name} belongs to action {owner}, not this one")
        return f"job {ns}/{name} {did} on {node}"

    def _op_mark_reboot(self, node: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        """Ask the node's reboot daemon (the marker, and in `mode: job` the sentinel Job), when a
        reboot slot is free; a node that rebooted since pinning is not asked again."""
        have = self._read_node(node)
        boot = str(a.get("boot_id") or "")
        mine = have.annotations.get(REBOOT_ANNOTATION, "")
        if not have.boot_id:
            raise PermanentError(f"{node} reports no status.nodeInfo.bootID: cannot tell a reboot")
        if boot and have.boot_id != boot:
            return f"{node} rebooted already (bootID {boot} -> {have.boot_id})"
        if not mine.startswith(f"{ctx.action_id}:"):
            try:
                nodes = [node_view(n) for n in self.core.list_node().items]
            except (ApiException, HTTPError) as exc:
                raise _error(exc, "list nodes for the reboot lock") from exc
            busy = sorted(
                n.name for n in nodes if REBOOT_ANNOTATION in n.annotations and n.name != node
            )
            if len(busy) >= int(a.get("max_concurrent") or 1):
                raise TemporaryError(f"reboot lock: {len(busy)} node(s) rebooting: {busy[:5]}")
            marker = {REBOOT_ANNOTATION: f"{ctx.action_id}:{have.boot_id}"}
            self._patch_node(node, {"metadata": {"annotations": marker}}, ctx)
        if a.get("mode") == "job":
            return "marked; " + self._op_run_node_job(node, a, ctx)
        return f"marked {node} for its reboot daemon (bootID {have.boot_id})"

    def _op_await_reboot(self, node: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        """Done once the bootID changed and the node is Ready: take the marker away and record
        the reboot on the node; until then a temporary error (the runner asks again)."""
        have = self._read_node(node)
        marker = have.annotations.get(REBOOT_ANNOTATION)
        if marker is None:
            return f"{node}: no reboot marker (confirmed earlier)"
        before = marker_boot_id(marker)
        if have.boot_id == before:
            raise TemporaryError(f"waiting for {node} to reboot (bootID {before})")
        if not have.ready:
            raise TemporaryError(f"{node} rebooted, waiting for it to be Ready")
        times = [*reboot_times(have), time.time()][-KEEP_REBOOTS:]
        body = {
            "metadata": {
                "annotations": {
                    REBOOT_ANNOTATION: None,
                    REBOOTS_ANNOTATION: ",".join(f"{t:.0f}" for t in times),
                }
            }
        }
        self._patch_node(node, body, ctx)
        return f"{node} rebooted (bootID {before} -> {have.boot_id}) and Ready: marker removed"

    def _op_clear_reboot(self, node: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        have = self._read_node(node)
        if not have.annotations.get(REBOOT_ANNOTATION, "").startswith(f"{ctx.action_id}:"):
            return f"{node}: no reboot marker of this action"
        self._patch_node(node, {"metadata": {"annotations": {REBOOT_ANNOTATION: None}}}, ctx)
        return f"{node}: reboot marker removed"

    def _event(self, ns: str, name: str, uid: str | None, reason: str, ctx: WriteContext) -> None:
        """Best effort: the journal is the record; the Event is for `kubectl describe`."""
        ev = client.CoreV1Event(
            metadata=client.V1ObjectMeta(
                generate_name=f"{name}.gpufleet-", namespace=ns, annotations=_ctx_annotations(ctx)
            ),
            involved_object=client.V1ObjectReference(kind="Pod", name=name, namespace=ns, uid=uid),
            reason=reason,
            type="Normal",
            message=f"{ctx.playbook} by {ctx.actor}: {ctx.reason} "
            f"(action {ctx.action_id}, incident {ctx.incident_id})",
            source=client.V1EventSource(component="gpufleet"),
        )
        try:
            self.core.create_namespaced_event(ns, ev)
        except (ApiException, HTTPError, ValueError) as exc:
            log.warning("could not record event for %s/%s: %s", ns, name, exc)

    def _delete(self, ns: str, name: str, uid: str | None, ctx: WriteContext) -> str:
        if uid is None:
            return f"{ns}/{name} already gone"
        opts = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid))
        try:
            self.core.delete_namespaced_pod(name, ns, body=opts)
        except ApiException as exc:
            if exc.status == 404:
                return f"{ns}/{name} already gone"
            if exc.status == 409:
                return f"{ns}/{name} already replaced"
            raise
        self._event(ns, name, uid, "GpufleetRestart", ctx)
        return f"deleted {ns}/{name}"

    def _op_delete_pod(self, target: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        ns, name = target.split("/", 1)
        return self._delete(ns, name, a.get("uid"), ctx)

    def _op_delete_pods(self, ns: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        done = [self._delete(ns, n, u, ctx) for n, u in zip(a["names"], a["uids"], strict=True)]
        return "; ".join(done)

    def _evict(self, ns: str, name: str, uid: str, grace: int | None, ctx: WriteContext) -> str:
        """EVICTED when this call evicted the pod; GONE when it was already gone, replaced or
        terminating (another controller's doing, e.g. the taint manager on an unreachable node,
        never counted as ours); BLOCKED when a PDB refuses (429).

        The UID precondition is the guarantee; reading the pod first also skips a replacement
        on API servers that ignore an Eviction's preconditions."""
        try:
            now = self.core.read_namespaced_pod(name, ns)
        except ApiException as exc:
            if exc.status == 404:
                return GONE
            raise
        meta: Any = now.metadata
        if meta.uid != uid or meta.deletion_timestamp is not None:
            return GONE  # already replaced, or already terminating
        opts = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid=uid), grace_period_seconds=grace
        )
        body = client.V1Eviction(
            metadata=client.V1ObjectMeta(
                name=name, namespace=ns, annotations=_ctx_annotations(ctx)
            ),
            delete_options=opts,
        )
        try:
            self.core.create_namespaced_pod_eviction(name, ns, body)
        except ApiException as exc:
            if exc.status in (404, 409):
                return GONE  # gone, or already replaced (UID precondition)
            if exc.status == 429:
                return BLOCKED
            if exc.status == 500 and MULTIPLE_PDBS in str(exc.body or ""):
                raise PermanentError(
                    f"{ns}/{name}: more than one PodDisruptionBudget selects this pod, which the "
                    "eviction API refuses on every attempt: a person must remove the overlap "
                    f"(kubectl get pdb -n {ns})"
                ) from exc
            raise
        return EVICTED

    def _op_evict_pods(self, node: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        pending = [tuple(p) for p in a.get("pods") or ()]
        deadline = self.clock() + float(a.get("timeout") or 600.0)
        backoff = float(a.get("backoff_initial") or 5.0)
        grace = a.get("grace_period")
        evicted = gone = 0
        while pending:
            blocked = []
            for ns, name, uid in pending:
                got = self._evict(ns, name, uid, grace, ctx)
                evicted += got == EVICTED
                gone += got == GONE
                if got == BLOCKED:
                    blocked.append((ns, name, uid))
            pending = blocked
            if not pending:
                break
            left = deadline - self.clock()
            if left <= 0:
                names = ", ".join(f"{p[0]}/{p[1]}" for p in pending)
                raise PermanentError(f"disruption budget still blocks {names} after the timeout")
            ctx.alive()  # renew the claim before waiting (raises when it was lost)
            self.sleep(min(backoff, left))
            backoff = min(backoff * 2, float(a.get("backoff_max") or 60.0))
        if gone:
            return f"evicted {evicted} pod(s) from {node}; {gone} already gone or going"
        return f"evicted {evicted} pod(s) from {node}"
