"""The writes to Kubernetes: one `_op_<name>` per intent the playbooks plan, each journaled by
the runner before `apply` is called.

Every node write carries `gpufleet.io/action`, `gpufleet.io/incident`, `gpufleet.io/reason` and
`gpufleet.io/by` annotations (kube.write_annotations); evictions and pod deletions are in
kube.evictions. Every intent is idempotent: node patches check the current state first, rules
and Jobs are named from the GPU or the action and found again on a retry, so re-applying after
a crash never acts twice.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from errors import PermanentError, TemporaryError
from kube.api_errors import api_error
from kube.dra import DraClient, DraDevice
from kube.evictions import PodEvictions
from kube.jobs import KubeNodeJobs
from kube.reader import KubeReader
from kube.taints import Taint, patch_taints, same
from kube.write_annotations import ctx_annotations
from remediations.capabilities import WriteContext
from remediations.cluster_names import GPU_LABEL, KEEP_REBOOTS, marker_boot_id
from remediations.cluster_rules import reboot_times
from remediations.types import (
    ACTION_ANNOTATION,
    OWNER_ANNOTATION,
    REBOOT_ANNOTATION,
    REBOOTS_ANNOTATION,
    Intent,
)


class KubeWriter:
    """`Actuator.apply` over the `kubernetes` client: looks up `_op_<intent.op>` and maps the
    client's errors to temporary or permanent ones."""

    def __init__(
        self,
        core: client.CoreV1Api,
        dra: DraClient,
        jobs: KubeNodeJobs,
        reader: KubeReader,
        evictions: PodEvictions,
    ) -> None:
        self.core = core
        self.dra = dra
        self.jobs = jobs
        self.reader = reader
        self.evictions = evictions

    def apply(self, intent: Intent, ctx: WriteContext) -> str:
        handler = getattr(self, f"_op_{intent.op}", None)
        if handler is None:
            raise PermanentError(f"unknown intent {intent.op}")
        try:
            return str(handler(intent.target, intent.args, ctx))
        except (ApiException, HTTPError) as exc:
            raise api_error(exc, f"{intent.op} {intent.target}") from exc

    def _patch_node(self, name: str, body: dict[str, Any], ctx: WriteContext) -> None:
        meta = body.setdefault("metadata", {})
        meta.setdefault("annotations", {}).update(ctx_annotations(ctx))
        self.core.patch_node(name, body)

    # ---- pods (kube.evictions) --------------------------------------------------------------

    def _op_evict_pods(self, node: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        return self.evictions.evict_pods(node, a, ctx)

    def _op_delete_pod(self, target: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        return self.evictions.delete_pod(target, a, ctx)

    def _op_delete_pods(self, ns: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        return self.evictions.delete_pods(ns, a, ctx)

    # ---- node scheduling, taints, labels ------------------------------------------------------

    def _op_cordon(self, name: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        node = self.reader.existing_node(name)
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
        node = self.reader.existing_node(name)
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

        if not patch_taints(self.core, name, add, ctx_annotations(ctx)):
            return "taint already present"
        return f"tainted {key}={value}:{effect}"

    def _op_untaint(self, name: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        key = str(a["key"])

        def remove(current: list[Taint]) -> list[Taint] | None:
            keep = [t for t in current if not same(t, key)]
            return None if len(keep) == len(current) else keep

        if not patch_taints(self.core, name, remove, ctx_annotations(ctx)):
            return "taint already absent"
        return f"removed taint {key}"

    def _op_label(self, name: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        self._patch_node(name, {"metadata": {"labels": dict(a["labels"])}}, ctx)
        return f"labelled {sorted(a['labels'])}"

    def _op_unlabel(self, name: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        self._patch_node(name, {"metadata": {"labels": {k: None for k in a["keys"]}}}, ctx)
        return f"unlabelled {list(a['keys'])}"

    def _op_annotate(self, name: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        self._patch_node(name, {"metadata": {"annotations": dict(a["annotations"])}}, ctx)
        return f"annotated {sorted(a['annotations'])}"

    # ---- one GPU's DeviceTaintRule (fence_gpu, unfence_gpu) -----------------------------------

    def _op_fence_device(self, node: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        if "device" not in a:
            raise PermanentError("fence_device was not pinned to a DRA device")
        dev = DraDevice(str(a["driver"]), str(a["pool"]), str(a["device"]), node)
        taint = (str(a["key"]), str(a["value"]), str(a["effect"]))
        labels = {GPU_LABEL: str(a["uuid"]).lower()[:63]}
        name = str(a["rule"])
        if not self.dra.create_rule(name, dev, taint, labels, ctx_annotations(ctx)):
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
            self.dra.set_taint(name, taint, ctx_annotations(ctx))
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

    # ---- repair Jobs and reboots (reset_gpu, reboot_node) -------------------------------------

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
        have = self.reader.existing_node(node)
        boot = str(a.get("boot_id") or "")
        mine = have.annotations.get(REBOOT_ANNOTATION, "")
        if not have.boot_id:
            raise PermanentError(f"{node} reports no status.nodeInfo.bootID: cannot tell a reboot")
        if boot and have.boot_id != boot:
            return f"{node} rebooted already (bootID {boot} -> {have.boot_id})"
        if not mine.startswith(f"{ctx.action_id}:"):
            nodes = self.reader.nodes("list nodes for the reboot lock")
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
        have = self.reader.existing_node(node)
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
        have = self.reader.existing_node(node)
        if not have.annotations.get(REBOOT_ANNOTATION, "").startswith(f"{ctx.action_id}:"):
            return f"{node}: no reboot marker of this action"
        self._patch_node(node, {"metadata": {"annotations": {REBOOT_ANNOTATION: None}}}, ctx)
        return f"{node}: reboot marker removed"
