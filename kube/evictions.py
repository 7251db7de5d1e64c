"""Moving pods off a node: policy/v1 Evictions under the pinned UID, and pod deletions recorded
as Events.

Drains evict through policy/v1 (PDB 429 -> back off and retry, always inside the overall timeout,
kubectl #172) and never touch DaemonSet or mirror pods (the pin left them out). Every eviction
carries the action's annotations on the Eviction object; a deletion is recorded as an Event with
the same facts. The pinned UID is the precondition, so a replacement pod is never touched.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from errors import PermanentError
from kube.write_annotations import ctx_annotations
from remediations.capabilities import WriteContext

log = logging.getLogger(__name__)

EVICTED, GONE, BLOCKED = "evicted", "gone", "blocked"
"""What one eviction call found: ours, another's doing already, or refused by a PDB."""
MULTIPLE_PDBS = "more than one PodDisruptionBudget"
"""The eviction API's 500 for a pod that several budgets select: permanent until a person
removes the overlap (pkg/registry/core/pod/storage/eviction.go)."""


class PodEvictions:
    """The `evict_pods`, `delete_pod` and `delete_pods` writes."""

    def __init__(
        self,
        core: client.CoreV1Api,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.core = core
        self.clock = clock
        self.sleep = sleep

    def evict_pods(self, node: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        """Evict the pinned pods; those a PDB blocks are retried with back-off until the
        step's timeout, renewing the runner's claim before each wait."""
        pending = [tuple(p) for p in a.get("pods") or ()]
        deadline = self.clock() + float(a.get("timeout") or 600.0)
        backoff = float(a.get("backoff_initial") or 5.0)
        grace = a.get("grace_period")
        evicted = gone = 0
        while pending:
            blocked = []
            for ns, name, uid in pending:
                got = self.evict(ns, name, uid, grace, ctx)
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

    def evict(self, ns: str, name: str, uid: str, grace: int | None, ctx: WriteContext) -> str:
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
            metadata=client.V1ObjectMeta(name=name, namespace=ns, annotations=ctx_annotations(ctx)),
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

    def delete_pod(self, target: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        ns, name = target.split("/", 1)
        return self._delete(ns, name, a.get("uid"), ctx)

    def delete_pods(self, ns: str, a: Mapping[str, Any], ctx: WriteContext) -> str:
        done = [self._delete(ns, n, u, ctx) for n, u in zip(a["names"], a["uids"], strict=True)]
        return "; ".join(done)

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

    def _event(self, ns: str, name: str, uid: str | None, reason: str, ctx: WriteContext) -> None:
        """Best effort: the journal is the record; the Event is for `kubectl describe`."""
        ev = client.CoreV1Event(
            metadata=client.V1ObjectMeta(
                generate_name=f"{name}.gpufleet-", namespace=ns, annotations=ctx_annotations(ctx)
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
