"""Pinning: resolve what an intent will touch, from live reads, before the runner journals it.

Pod UIDs for deletes and evictions (a replacement under the same name is never touched), the
DRA device behind a GPU UUID, the keep-schedulable verdict of the pods-on-GPU grain's guard,
the node's bootID before a reboot. Nothing here writes; the writer then acts under exactly
these preconditions, so a write re-applied after a crash never acts twice.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from errors import PermanentError, TemporaryError
from kube.api_errors import api_error
from kube.dra import DraClient
from kube.reader import KubeReader
from remediations.cluster_names import GUARD_OP, UUID_LABEL, fence_rule_name
from remediations.cluster_rules import evictable, keep_schedulable
from remediations.types import FENCE_FALLBACK, Intent, fence_fallback_reason


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


class Pinner:
    """`Actuator.pin` over live reads (the reader) and the DRA adapter."""

    def __init__(self, reader: KubeReader, dra: DraClient) -> None:
        self.reader = reader
        self.dra = dra

    def pin(self, intent: Intent) -> Intent:
        a = dict(intent.args)
        if intent.op == "delete_pod" and not a.get("uid"):
            ns, name = intent.target.split("/", 1)
            p = self.reader.pod(ns, name)
            a["uid"] = p.uid if p is not None else None
        elif intent.op == "delete_pods":
            uids = list(a.get("uids") or [None] * len(a["names"]))
            for i, name in enumerate(a["names"]):
                if not uids[i]:
                    p = self.reader.pod(intent.target, name)
                    uids[i] = p.uid if p is not None else None
            a["uids"] = uids
        elif intent.op == "evict_pods" and "pods" not in a:
            a["pods"] = self._evictions(intent.target, a)
        elif intent.op == GUARD_OP and "cordon" not in a:
            self._pin_guard(intent.target, a)
        elif intent.op == "fence_device" and "device" not in a:
            if self._rule_version() is None:
                return self.pin(fence_fallback(intent))
            self._pin_device(intent.target, a)
        elif intent.op == "run_node_job" and UUID_LABEL in (a.get("labels") or {}):
            a["claims"] = self._claims_free(intent.target, str(a["labels"][UUID_LABEL]))
        elif intent.op == "mark_reboot" and "boot_id" not in a:
            a["boot_id"] = self.reader.existing_node(intent.target).boot_id
        return Intent(intent.op, intent.target, a)

    def _evictions(self, node: str, a: dict[str, Any]) -> list[list[str | None]]:
        """The pods an `evict_pods` step will evict, with their UIDs; a pod created since its
        GPU's holder was seen is a replacement, not the holder, and fails the step."""
        skip = frozenset(a.get("skip_namespaces") or ())
        job, only = a.get("job"), a.get("only")
        pods = [
            p
            for p in self.reader.pods_on_node(node)
            if evictable(p, bool(a.get("include_unmanaged")), skip)
            and (not job or p.job == job)
            and (only is None or p.key in only)
        ]
        seen = a.get("held_at")
        newer = [p.key for p in pods if seen and p.created is not None and p.created > seen]
        if newer:
            raise PermanentError(
                f"{', '.join(newer)} was replaced since the GPU's holder was seen: the new "
                "pod may not hold the GPU, so it is not evicted; decide again on fresh data"
            )
        return [[p.namespace, p.name, p.uid] for p in pods]

    def _pin_guard(self, node_name: str, a: dict[str, Any]) -> None:
        """The guard's verdict from the live node (and gpufleet's rule fencing the GPU)."""
        node = self.reader.existing_node(node_name)
        keep, why = keep_schedulable(
            node, self.reader.device_taint_rule(fence_rule_name(str(a["gpu"])))
        )
        a.update(
            cordon=not keep,
            why=f"{a['fallback']}; {why}" if a.get("fallback") else why,
            capacity=node.gpu_capacity,
            allocatable=node.gpu_allocatable,
        )
        if a.get("evict_holders"):
            a["pods"], note = self._gpu_holders(node_name, str(a["gpu"]))
            a["why"] = f"{a['why']}; {note}"

    def _rule_version(self) -> str | None:
        try:
            return self.dra.rule_version()
        except (ApiException, HTTPError) as exc:
            raise api_error(exc, "discover the DeviceTaintRule API") from exc

    def _gpu_holders(self, node: str, uuid: str) -> tuple[list[list[str]], str]:
        """The evictable pods whose ResourceClaims hold the GPU, as `evict_pods` takes them,
        and what was found. Pods that cannot be told are never guessed: none, and a person is
        told."""
        try:
            dev = self.dra.find_device(node, uuid)
            holders = self.dra.device_holders() if dev is not None else None
        except (ApiException, HTTPError) as exc:
            raise api_error(exc, f"read the ResourceClaims of GPU {uuid}") from exc
        if dev is None or holders is None:
            return [], (
                f"the pods holding GPU {uuid} cannot be told here (no DRA claims): none evicted, "
                "a person decides"
            )
        pods = []
        for key in holders.get((dev.driver, dev.pool, dev.device), ()):
            ns, _, name = key.partition("/")
            p = self.reader.pod(ns, name) if name and " " not in key else None
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
            raise api_error(exc, f"read the ResourceClaims of GPU {uuid}") from exc
        except HTTPError as exc:
            raise api_error(exc, f"read the ResourceClaims of GPU {uuid}") from exc
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
            raise api_error(exc, f"list resource slices of {node}") from exc
        if dev is None:
            raise PermanentError(
                f"no ResourceSlice of driver {a.get('driver') or 'gpu.nvidia.com'} on node {node} "
                f"has a device with uuid {a['uuid']}: not a DRA GPU, cannot fence it alone"
            )
        a.update(driver=dev.driver, pool=dev.pool, device=dev.device)
