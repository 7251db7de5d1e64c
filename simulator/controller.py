"""The simulated scheduler, job controllers and disruption controller of the simulated cluster.

Remediation is only testable if actions have consequences: a deleted or evicted pod of a training
job comes back (same name, new uid, like Kubeflow), a ReplicaSet pod comes back under a new name,
a cordoned or tainted node gets no new pods, a recreated pod takes a while to become Ready (so a
PodDisruptionBudget blocks the next eviction of the same job), and a pod that fits nowhere stays
Pending. All of it runs on scenario time, under the object store's lock.
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Any

from simulator.disruption import TERMINAL
from simulator.kube_api import objects as ko
from simulator.kube_api import pods as kp
from simulator.kube_api.object_store import ObjectStore
from simulator.layout import SimNode, SimPod
from simulator.scenario import WorkloadKind

Obj = dict[str, Any]
NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
"""The alphabet of generated name suffixes (Kubernetes' rand.String)."""


@dataclass(slots=True)
class Slot:
    """Bookkeeping for one live workload pod (keyed by pod uid)."""

    template: SimPod
    gpus: tuple[int, ...] = ()
    ready_at: float | None = None
    placement: SimPod | None = None
    """Where it runs, as the metric engine sees it (set once Running)."""


def matching_toleration(pod: Obj, taint: Obj) -> Obj | None:
    """The pod's first toleration of `taint` (its `tolerationSeconds` bounds a NoExecute stay)."""
    for t in pod["spec"].get("tolerations") or []:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t["key"] == taint.get("key")):
            return dict(t)
        if t.get("key") == taint.get("key") and t.get("value", "") == taint.get("value", ""):
            return dict(t)
    return None


def tolerates(pod: Obj, taint: Obj) -> bool:
    return matching_toleration(pod, taint) is not None


class JobController:
    """Scheduler + owners' controllers: places, starts, finishes and replaces workload pods."""

    def __init__(
        self,
        store: ObjectStore,
        nodes: list[SimNode],
        *,
        pools: dict[str, str | None],
        owner_uids: dict[str, str],
        startup_seconds: float,
        wall_of: Callable[[float], float],
        emit: Callable[..., None],
    ) -> None:
        self.store = store
        self.nodes = nodes
        self.pools = pools
        self.owner_uids = owner_uids
        self.startup_seconds = startup_seconds
        self.wall_of = wall_of
        self.emit = emit
        self.slots: dict[str, Slot] = {}
        self.waiting: list[SimPod] = []
        """Layout pods whose workload has not started yet."""
        self.replicas: dict[str, int] = {}
        self.blocked: Callable[[], Collection[tuple[str, int]]] = tuple
        self.ended: list[SimPod] = []
        """Placements that stopped (evicted, deleted, finished), oldest first."""
        self.host_ips = {n.name: ko.node_ip(i) for i, n in enumerate(nodes)}

    # --- placement ----------------------------------------------------------------------------

    def _used(self) -> dict[str, set[int]]:
        used: dict[str, set[int]] = {n.name: set() for n in self.nodes}
        for node, device in self.blocked():  # Unhealthy devices are never handed out
            used.setdefault(node, set()).add(device)
        for uid, slot in self.slots.items():
            pod = self._pod_by_uid(uid, slot)
            if (
                pod is not None
                and pod["spec"].get("nodeName")
                and pod["status"].get("phase") not in TERMINAL
            ):
                used.setdefault(pod["spec"]["nodeName"], set()).update(slot.gpus)
        return used

    def _pod_by_uid(self, uid: str, slot: Slot) -> Obj | None:
        name = slot.template.name
        pod = self.store.get("pods", slot.template.namespace, name)
        return pod if pod is not None and pod["metadata"]["uid"] == uid else None

    def _fits(self, pod: Obj, node: Obj) -> str | None:
        """None if `pod` may go to `node`, else the reason it may not."""
        if node["spec"].get("unschedulable"):
            return "node(s) were unschedulable"
        ready = any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in node["status"].get("conditions", [])
        )
        if not ready:
            return "node(s) were not ready"
        labels = node["metadata"].get("labels") or {}
        for k, v in (pod["spec"].get("nodeSelector") or {}).items():
            if labels.get(k) != v:
                return "node(s) didn't match Pod's node affinity/selector"
        for taint in node["spec"].get("taints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(pod, taint):
                kv = f"{taint.get('key')}: {taint.get('value', '')}"
                return f"node(s) had untolerated taint {{{kv}}}"
        return None

    def schedule(self, pod: Obj, slot: Slot, now: float) -> bool:
        """Bind `pod` (not stored yet or Pending) to a node with room; False if none fits."""
        need = kp.gpu_count(pod)
        used = self._used()
        reasons: dict[str, int] = {}
        names = [n.name for n in self.nodes]
        gpus_of = {n.name: n.gpus for n in self.nodes}
        for name in names:
            node = self.store.get("nodes", "", name)
            if node is None:
                continue
            why = self._fits(pod, node)
            free = [i for i in range(gpus_of[name]) if i not in used.get(name, set())]
            if why is None and len(free) < need:
                why = "Insufficient nvidia.com/gpu"
            if why is not None:
                reasons[why] = reasons.get(why, 0) + 1
                continue
            slot.gpus = tuple(free[:need])
            slot.ready_at = now + self.startup_seconds
            kp.set_scheduled(pod, name, self.wall_of(now))
            self.store.put("pods", pod)
            ns, pname = pod["metadata"]["namespace"], pod["metadata"]["name"]
            self.emit(
                pod,
                "Scheduled",
                f"Successfully assigned {ns}/{pname} to {name}",
                component="default-scheduler",
            )
            return True
        detail = ", ".join(f"{c} {r}" for r, c in sorted(reasons.items()))
        msg = f"0/{len(self.nodes)} nodes are available: {detail}."
        was = pod.get("status", {}).get("conditions") or [{}]
        if pod["spec"].get("nodeName") is None and was[0].get("message") == msg:
            return False
        kp.set_unschedulable(pod, self.wall_of(now), msg)
        self.store.put("pods", pod)
        self.emit(pod, "FailedScheduling", msg, type_="Warning", component="default-scheduler")
        return False

    # --- lifecycle ----------------------------------------------------------------------------

    def create(self, template: SimPod, now: float, *, place_as_layout: bool) -> None:
        pod = kp.workload_pod(
            template,
            ts=self.wall_of(now),
            owner_uid=self.owner_uids[template.workload],
            pool=self.pools.get(template.workload),
        )
        slot = Slot(template)
        self.slots[pod["metadata"]["uid"]] = slot
        if place_as_layout:  # the initial placement: already running where the layout put it
            slot.gpus = template.gpu_indices
            pod["spec"]["nodeName"] = template.node
            self._start(pod, slot, now, template.start)
        else:
            self.schedule(pod, slot, now)

    def _layout_spot_free(self, t: SimPod) -> bool:
        node = self.store.get("nodes", "", t.node)
        if node is None or node["spec"].get("unschedulable"):
            return False
        return not self._used().get(t.node, set()) & set(t.gpu_indices)

    def _start(self, pod: Obj, slot: Slot, now: float, start: float) -> None:
        node = pod["spec"]["nodeName"]
        slot.placement = replace(slot.template, node=node, gpu_indices=slot.gpus, start=start)
        ip = kp.pod_ip(slot.template.namespace, slot.template.name, start)
        kp.set_running(pod, self.wall_of(now), self.host_ips.get(node, ""), ip)
        self.store.put("pods", pod)

    def _ended(self, slot: Slot, end: float) -> None:
        if slot.placement is not None:
            self.ended.append(replace(slot.placement, end=end))
            slot.placement = None

    def replace_pod(self, gone: Obj, now: float) -> None:
        """The owner's controller notices a pod is gone and creates its replacement."""
        slot = self.slots.pop(gone["metadata"]["uid"], None)
        if slot is None:
            return
        t = slot.template
        self._ended(slot, now if t.end is None else min(now, t.end))
        if t.end is not None and now >= t.end:
            return
        if t.kind != WorkloadKind.TRAINING:
            suffix = "".join(secrets.choice(NAME_CHARS) for _ in range(5))
            t = replace(t, name=f"{t.owner_name}-{suffix}")
        self.create(t, now, place_as_layout=False)

    def tick(self, now: float) -> None:
        """Advance time-driven state: workload start/end, start-up, pending pods."""
        due = [t for t in self.waiting if t.start <= now]
        if due:
            self.waiting = [t for t in self.waiting if t.start > now]
            for t in due:  # where the layout (and so the ground truth) puts them, if still free
                self.create(t, now, place_as_layout=self._layout_spot_free(t))
        for uid, slot in list(self.slots.items()):
            pod = self._pod_by_uid(uid, slot)
            if pod is None:
                continue
            phase = pod["status"].get("phase")
            t = slot.template
            if t.end is not None and now >= t.end and phase not in TERMINAL:
                self._finish(uid, pod, slot, now)
            elif phase == "Pending" and pod["spec"].get("nodeName") is None:
                self.schedule(copy.deepcopy(pod), slot, now)
            elif phase == "Pending" and slot.ready_at is not None and now >= slot.ready_at:
                pod = copy.deepcopy(pod)
                self._start(pod, slot, now, now)
                self.emit(
                    pod,
                    "Started",
                    "Started container",
                    component="kubelet",
                    host=pod["spec"]["nodeName"],
                )

    def _finish(self, uid: str, pod: Obj, slot: Slot, now: float) -> None:
        self._ended(slot, slot.template.end if slot.template.end is not None else now)
        if slot.template.kind == WorkloadKind.TRAINING:
            pod = copy.deepcopy(pod)
            kp.set_finished(pod, self.wall_of(now))
            self.store.put("pods", pod)
            slot.gpus = ()
        else:
            self.slots.pop(uid, None)
            self.store.delete("pods", slot.template.namespace, slot.template.name)

    def allocations(self) -> list[tuple[Obj, tuple[int, ...]]]:
        """(pod, GPU indices) of every live pod bound to a node with GPUs (the scheduler's
        allocation, which a ResourceClaim records on a DRA node)."""
        out = []
        for uid, slot in self.slots.items():
            pod = self._pod_by_uid(uid, slot)
            if (
                pod is not None
                and pod["spec"].get("nodeName")
                and slot.gpus
                and pod["status"].get("phase") not in TERMINAL
            ):
                out.append((pod, slot.gpus))
        return out

    def pods_on_device(self, node: str, device: int) -> list[Obj]:
        """The live pods the scheduler gave GPU `device` of `node` (the kubelet's allocation)."""
        return [
            p for p, gpus in self.allocations() if p["spec"]["nodeName"] == node and device in gpus
        ]

    def running(self) -> list[SimPod]:
        """Pods running now, where they run (`end` is the workload's planned end, if any)."""
        return [s.placement for s in self.slots.values() if s.placement is not None]

    def placements(self) -> list[SimPod]:
        """Every placement that ever ran (ended ones with `end` set), then the running ones."""
        return [*self.ended, *self.running()]
