"""The live state of a simulated cluster: what the simulated Kubernetes API serves and changes.

Built from a scenario's Layout (nodes, the initial pod placement), it then lives on its own:
cordons, taints, evictions and deletions arrive through the API, the job controller reacts, and
the metric engine asks `pods_for_metrics()` which pods sit on which GPUs *now*, so that a pod
that moved also moves its `pod`/`namespace` labels in the DCGM series. Thread-safe; time comes
from a `SimClock` (injectable).
"""

from __future__ import annotations

import copy
from collections import deque
from dataclasses import dataclass
from typing import Any

from simulator import dra
from simulator.batch_jobs import BatchJobs
from simulator.clock import SimClock
from simulator.controller import JobController
from simulator.device_health import DevicePlugin, device_faults
from simulator.disruption import Invalid, TooManyRequests, check_eviction, refresh_pdbs
from simulator.kube_api import objects as ko
from simulator.kube_api import pods as kp
from simulator.kube_api.object_store import Conflict, ObjectStore
from simulator.layout import Layout, SimPod, build_layout
from simulator.node_lifecycle import (
    add_default_tolerations,
    lifecycle_taints,
    toggled_writer_taint,
)
from simulator.repairs import Repairs
from simulator.scenario import Scenario, WorkloadKind
from simulator.taint_eviction import eviction_due

Obj = dict[str, Any]
SYSTEM_NAMESPACES = (
    "default",
    "kube-system",
    "kube-node-lease",
    "gpufleet",
    "gpufleet-jobs",  # gpufleet's privileged node Jobs (deploy/base/namespace.yaml)
    ko.GPU_NAMESPACE,
)
"""Namespaces that exist from the start (`gpufleet`: where gpufleet itself would run)."""
MAX_EVENTS = 2000
"""Events the simulated cluster itself emits are kept up to this many (oldest go first)."""


class NotFound(Exception):
    """The object does not exist (HTTP 404)."""


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    startup_seconds: float = 30.0
    """Scenario seconds from scheduling to Ready for a (re)created workload pod."""
    pdb_max_unavailable: int = 1
    pdb_sync_seconds: float = 1.0
    """Scenario seconds before the disruption controller observes a new PDB generation."""
    node_lifecycle: bool = True
    """The node lifecycle controller taints a cordoned node `node.kubernetes.io/unschedulable`
    and a node not Ready `not-ready` or `unreachable` (simulator.node_lifecycle)."""
    taint_writer_seconds: float = 0.0
    """> 0: another controller toggles a taint on every node this often (scenario seconds)."""
    """Every training job gets a policy/v1 PDB with this maxUnavailable."""
    history: int = 2000
    """Watch events kept; a watch from an older resourceVersion gets 410 Gone."""
    daemonsets: bool = True
    """GPU operator DaemonSet pods (dcgm-exporter, device plugin) on every node."""
    termination_seconds: float = 0.0
    """Scenario seconds a deleted or evicted pod stays Terminating (deletionTimestamp set)
    before it is gone; 0 removes it at once, as does a delete with gracePeriodSeconds 0."""
    dra: bool = True
    """Every GPU node runs the NVIDIA DRA driver and publishes a `gpu.nvidia.com` ResourceSlice;
    DeviceTaintRules then keep pods off (NoSchedule) or evict them from (NoExecute) a device."""


class SimCluster:
    """The cluster: objects in an ObjectStore plus the controllers that react to changes.

    Public surface: `get`, `write`, `delete`, `evict`, `tick`, `pods_for_metrics()`,
    `running_pods()`, `unschedulable_nodes()`, `pods_on(node)`, `set_node_ready()`, and
    `store` (e.g. `store.compact()` to make every older resourceVersion answer 410).
    """

    def __init__(
        self,
        scenario: Scenario,
        layout: Layout | None = None,
        *,
        clock: SimClock | None = None,
        options: ClusterOptions | None = None,
    ) -> None:
        self.scenario = scenario
        self.layout = layout if layout is not None else build_layout(scenario)
        self.clock = clock or SimClock(scenario.start)
        self.options = options or ClusterOptions()
        self.store = ObjectStore(self.options.history)
        self._pdb_seen_rv = -1
        self._pdb_pending: dict[tuple[str, str, int], float] = {}
        self._taint_writer_at = float("-inf")
        self._terminating: dict[tuple[str, str], tuple[str, float]] = {}
        """(namespace, name) -> (uid, scenario time it is gone) of Terminating pods."""
        self._emitted: deque[tuple[str, str]] = deque()
        pools = {f"{w.namespace}/{w.name}": w.pool for w in scenario.workloads}
        owner_uids = {k: ko.new_uid(f"{scenario.cluster}/owner/{k}") for k in pools}
        self.controller = JobController(
            self.store,
            self.layout.nodes,
            pools=pools,
            owner_uids=owner_uids,
            startup_seconds=self.options.startup_seconds,
            wall_of=self.clock.wall_of,
            emit=self._emit,
        )
        self.devices = DevicePlugin(
            self.store, device_faults(scenario, self.layout), emit=self._emit
        )
        self.device_taints: dict[tuple[str, int], Obj] = {}
        """(node, device index) -> the strongest DeviceTaintRule taint on that DRA device."""
        self._claims_seen_rv = -1
        self._lifecycle_seen_rv = -1
        self._no_execute_seen_rv = -1
        self._no_execute_nodes: list[str] = []
        """Nodes with a NoExecute taint, as of `_no_execute_seen_rv` (the taint manager's list)."""
        self.controller.blocked = lambda: {*self.devices.unhealthy.keys(), *self._fenced()}
        self.repairs = Repairs(
            self.store,
            scenario,
            self.layout,
            self.controller,
            self.devices,
            now=self.clock.scenario_time,
            wall=self.clock.now,
            emit=self._emit,
            delete_pod=lambda ns, name: self.delete("pods", ns, name),
        )
        self.batch = BatchJobs(self.store, scenario, self.repairs)
        with self.store.lock:
            self._build()

    # --- construction -------------------------------------------------------------------------

    def _build(self) -> None:
        sc, now, wall = self.scenario, self.clock.scenario_time(), self.clock.now()
        for i, n in enumerate(self.layout.nodes):
            self.store.put("nodes", ko.node_object(n, i, wall, sc.cluster))
        if self.options.dra:
            for n in self.layout.nodes:
                if n.gpus:
                    self.store.put(dra.SLICES, dra.resource_slice(self.layout, n, wall, sc.cluster))
        for ns in sorted({*SYSTEM_NAMESPACES, *(w.namespace for w in sc.workloads)}):
            meta = {
                "name": ns,
                "uid": ko.new_uid(f"{sc.cluster}/ns/{ns}"),
                "creationTimestamp": ko.rfc3339(wall),
                "labels": {"kubernetes.io/metadata.name": ns},
            }
            body = {
                "kind": "Namespace",
                "apiVersion": "v1",
                "metadata": meta,
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            }
            self.store.put("namespaces", body)
        if self.options.daemonsets:
            for name in ko.DAEMONSETS:
                ds = ko.daemonset_object(name, wall, sc.cluster, len(self.layout.nodes))
                self.store.put("daemonsets", ds)
                for i, n in enumerate(self.layout.nodes):
                    pod = kp.daemon_pod(ds, n.name, wall)
                    pod["status"]["hostIP"] = pod["status"]["podIP"] = ko.node_ip(i)
                    self.store.put("pods", pod)
        for w in sc.workloads:
            key = f"{w.namespace}/{w.name}"
            self.controller.replicas[key] = w.replicas
            if w.kind == WorkloadKind.TRAINING and key not in self.layout.unplaced:
                label: dict[str, str] = {w.job_label: w.name}
                pdb = ko.pdb_object(
                    w.namespace, w.name, label, wall, self.options.pdb_max_unavailable
                )
                self.store.put("poddisruptionbudgets", pdb)
        self.devices.update(now)
        for p in self.layout.pods:
            if p.start <= now:
                self.controller.create(p, now, place_as_layout=True)
            else:
                self.controller.waiting.append(p)
        self._refresh_pdbs()
        self._sync_claims()

    # --- time ---------------------------------------------------------------------------------

    def tick(self) -> None:
        """Apply everything due by the clock's current scenario time."""
        with self.store.lock:
            t = self.clock.scenario_time()
            self._reap(t)
            self.devices.update(t)
            self.controller.tick(t)
            self.batch.tick(t, self.clock.now())
            self.repairs.tick()
            self._concurrent_taint_writer(t)
            self._node_lifecycle()
            self._taint_eviction()
            self._refresh_pdbs()
            self._sync_claims()

    def _pdb_observed(self, pdb: Obj) -> bool:
        """Has the disruption controller processed this PDB generation? Only
        `pdb_sync_seconds` of scenario time after it was written (until then evictions under
        it answer 429, as on a real cluster)."""
        meta = pdb["metadata"]
        gen = meta.get("generation", 1)
        if (pdb.get("status") or {}).get("observedGeneration", 0) >= gen:
            return True
        key = (meta["namespace"], meta["name"], gen)
        now = self.clock.now()
        first = self._pdb_pending.setdefault(key, now)
        if now - first >= self.options.pdb_sync_seconds:
            del self._pdb_pending[key]
            return True
        return False

    def _refresh_pdbs(self) -> None:
        seen = max(self.store.changed_at("pods"), self.store.changed_at("poddisruptionbudgets"))
        if seen != self._pdb_seen_rv or self._pdb_pending:
            refresh_pdbs(self.store, self.controller.replicas, self._pdb_observed)
            pdb_rv = self.store.changed_at("poddisruptionbudgets")
            self._pdb_seen_rv = max(pdb_rv, self.store.changed_at("pods"))

    # --- reads --------------------------------------------------------------------------------

    def get(self, resource: str, namespace: str, name: str) -> Obj:
        obj = self.store.get(resource, namespace, name)
        if obj is None:
            raise NotFound(name)
        return obj

    def pods_for_metrics(self) -> list[SimPod]:
        """Every workload pod placement that ever ran, in the layout's SimPod form.

        Ended placements (evicted, deleted, finished) carry `end`; running ones are where they
        run now. This is what `FleetSimulator.sample(t, pods=...)` wants: counters integrate
        over each placement's life on its GPUs.
        """
        self.tick()
        with self.store.lock:
            return self.controller.placements()

    def running_pods(self) -> list[SimPod]:
        """Only the placements running now."""
        self.tick()
        with self.store.lock:
            return self.controller.running()

    def unschedulable_nodes(self) -> frozenset[str]:
        _, nodes = self.store.objects("nodes")
        return frozenset(n["metadata"]["name"] for n in nodes if n["spec"].get("unschedulable"))

    def gpu_allocatable(self) -> dict[str, int]:
        """Node -> allocatable `nvidia.com/gpu` as the device plugin left it."""
        _, nodes = self.store.objects("nodes")
        out: dict[str, int] = {}
        for n in nodes:
            v = str(n.get("status", {}).get("allocatable", {}).get("nvidia.com/gpu", ""))
            if v.isdigit():
                out[n["metadata"]["name"]] = int(v)
        return out

    def pods_on(self, node: str) -> list[Obj]:
        _, pods = self.store.objects("pods")
        return [p for p in pods if p["spec"].get("nodeName") == node]

    # --- writes -------------------------------------------------------------------------------

    def write(
        self, resource: str, obj: Obj, *, expect_rv: str | None = None, create: bool = False
    ) -> Obj:
        """Store a changed or new object; node changes let pending pods schedule again."""
        obj = copy.deepcopy(obj)  # the store owns what it holds
        old: Obj | None = None
        with self.store.lock:
            if create and resource == "pods":
                add_default_tolerations(obj)
            if create:
                meta = obj.setdefault("metadata", {})
                meta.setdefault("uid", ko.new_uid())
                meta.setdefault("creationTimestamp", ko.rfc3339(self.clock.now()))
            else:
                old = self.store.get(*_key(resource, obj))
                if old is None:
                    raise NotFound(obj["metadata"]["name"])
                for f in ("uid", "creationTimestamp"):
                    obj["metadata"][f] = old["metadata"][f]
            if resource == dra.RULES:
                self._stamp_taint(obj, old)
            out = self.store.put(resource, obj, expect_rv=expect_rv, create=create)
            if resource == dra.RULES:
                self._apply_device_taints()
            if resource == "poddisruptionbudgets":  # the disruption controller sees it later
                meta = out["metadata"]
                key = (meta["namespace"], meta["name"], int(meta.get("generation", 1)))
                self._pdb_pending.setdefault(key, self.clock.now())
            if resource == "nodes" and old is not None:
                self._note_node_change(old, out)
                out = self._taint_by_condition(out)
                self._evict_for_no_execute(out)
                self.tick()
            return out

    def _evict_for_no_execute(self, node: Obj, pods: list[Obj] | None = None) -> None:
        """The taint manager: a pod leaves a node with NoExecute taints at once when it does not
        tolerate them, or when its `tolerationSeconds` (300 s by default for not-ready and
        unreachable) have run out on fleet time."""
        taints = [t for t in node["spec"].get("taints") or [] if t.get("effect") == "NoExecute"]
        if not taints:
            return
        now = self.clock.now()
        for listed in self.pods_on(node["metadata"]["name"]) if pods is None else pods:
            ns, name = listed["metadata"]["namespace"], listed["metadata"]["name"]
            pod = self.store.get("pods", ns, name)  # an eviction may take a gang's others along
            if pod is None or pod["metadata"]["uid"] != listed["metadata"]["uid"]:
                continue
            due = eviction_due(pod, taints, now)
            if due is None or due > now or pod["metadata"].get("deletionTimestamp"):
                continue
            self._emit(
                pod,
                "TaintManagerEviction",
                f"Marking for deletion Pod {ns}/{name}",
                component="taint-eviction-controller",
            )
            self.delete("pods", ns, name)

    def _taint_eviction(self) -> None:
        """The taint manager's timed evictions, on every node with a NoExecute taint (the list
        rebuilt only when nodes changed: a tick must stay cheap on a large fleet)."""
        if self.store.changed_at("nodes") != self._no_execute_seen_rv:
            self._no_execute_seen_rv = self.store.changed_at("nodes")
            _, nodes = self.store.objects("nodes")
            self._no_execute_nodes = [
                n["metadata"]["name"]
                for n in nodes
                if any(t.get("effect") == "NoExecute" for t in n["spec"].get("taints") or ())
            ]
        if not self._no_execute_nodes:
            return
        on: dict[str, list[Obj]] = {name: [] for name in self._no_execute_nodes}
        for pod in self.store.objects("pods")[1]:  # one pass over pods, not one per node
            on.get(pod["spec"].get("nodeName") or "", []).append(pod)
        for name, pods in on.items():
            node = self.store.get("nodes", "", name)
            if node is not None:
                self._evict_for_no_execute(node, pods)

    # --- DRA device taints --------------------------------------------------------------------

    def _fenced(self) -> set[tuple[str, int]]:
        return {k for k, t in self.device_taints.items() if t.get("effect") in dra.BLOCKING}

    def _stamp_taint(self, rule: Obj, old: Obj | None) -> None:
        """`timeAdded` is set on create, and again when an update changes the effect."""
        taint = (rule.get("spec") or {}).get("taint")
        if not isinstance(taint, dict):
            return
        before = ((old or {}).get("spec") or {}).get("taint") or {}
        if not taint.get("timeAdded") or (
            before
            and before.get("effect") != taint.get("effect")
            and taint.get("timeAdded") == before.get("timeAdded")
        ):
            taint["timeAdded"] = ko.rfc3339(self.clock.now())

    def _apply_device_taints(self) -> None:
        """Recompute device taints; NoExecute evicts the pods allocated a newly tainted device
        (the device taint eviction controller), then pending pods may schedule elsewhere."""
        _, slices = self.store.objects(dra.SLICES)
        _, rules = self.store.objects(dra.RULES)
        self.device_taints = dra.device_taints(slices, rules)
        self._sync_claims()
        _, claims = self.store.objects(dra.CLAIMS)
        victims: dict[tuple[str, str, str], str] = {}
        for claim in claims:  # the controller finds pods through the claims allocated the device
            for pool, device in dra.claimed_devices(claim):
                taint = self.device_taints.get((pool, device))  # the pool is the node's name
                if taint is None or taint.get("effect") != "NoExecute":
                    continue
                for ref in claim["status"].get("reservedFor") or ():
                    key = (claim["metadata"]["namespace"], ref.get("name", ""), ref.get("uid", ""))
                    victims.setdefault(
                        key,
                        f"device {dra.DRIVER}/{pool}/{dra.device_name(device)} has taint "
                        f"{taint.get('key')}:NoExecute",
                    )
        for (ns, name, uid), why in sorted(victims.items()):
            pod = self.store.get("pods", ns, name)
            if pod is None or pod["metadata"]["uid"] != uid:
                continue
            self._emit(
                pod,
                "DeviceTaintManagerEviction",
                f"Marking for deletion Pod {ns}/{name}: {why}",
                component="device-taint-eviction-controller",
            )
            self.delete("pods", ns, name)
        self.tick()

    def _sync_claims(self) -> None:
        """The ResourceClaim controller and scheduler on DRA nodes: every bound pod holding GPUs
        has a claim allocated those devices and reserved for it; the claim of a pod that is gone
        or done is deleted (a template's claim does not outlive its pod)."""
        if not self.options.dra or self.store.changed_at("pods") == self._claims_seen_rv:
            return
        self._claims_seen_rv = self.store.changed_at("pods")
        want = {p["metadata"]["uid"]: (p, gpus) for p, gpus in self.controller.allocations()}
        _, claims = self.store.objects(dra.CLAIMS)
        have: set[str] = set()
        for c in claims:
            owner = (c["metadata"].get("ownerReferences") or [{}])[0].get("uid", "")
            if owner in want:
                have.add(owner)
            else:
                self.store.delete(dra.CLAIMS, c["metadata"]["namespace"], c["metadata"]["name"])
        wall = self.clock.now()
        for uid, (pod, gpus) in want.items():
            if uid not in have:
                claim = dra.resource_claim(pod, pod["spec"]["nodeName"], gpus, wall)
                self.store.put(dra.CLAIMS, claim)

    def _taint_by_condition(self, node: Obj) -> Obj:
        """The node lifecycle controller: the unschedulable taint follows spec.unschedulable,
        not-ready and unreachable follow the Ready condition (a write of its own, after the one
        that changed the node)."""
        taints = lifecycle_taints(node, ko.rfc3339(self.clock.now()))
        if taints is None or not self.options.node_lifecycle:
            return node
        changed = {**node, "spec": {**node["spec"], "taints": taints or None}}
        if not taints:
            changed["spec"].pop("taints")
        return self.store.put("nodes", changed)

    def _node_lifecycle(self) -> None:
        """The lifecycle controller's pass over nodes changed since its last one (a reboot's
        NotReady is written by the reboot daemon, not through `write`)."""
        if self.store.changed_at("nodes") == self._lifecycle_seen_rv:
            return
        _, nodes = self.store.objects("nodes")
        for n in nodes:
            self._taint_by_condition(n)
        self._lifecycle_seen_rv = self.store.changed_at("nodes")

    def _concurrent_taint_writer(self, t: float) -> None:
        """Another controller toggling a taint of its own on every node, every
        `taint_writer_seconds` of scenario time (0: off)."""
        every = self.options.taint_writer_seconds
        if every <= 0 or t - self._taint_writer_at < every:
            return
        self._taint_writer_at = t
        _, nodes = self.store.objects("nodes")
        for n in nodes:
            taints = toggled_writer_taint(n)
            body = {**n, "spec": {**n["spec"], "taints": taints or None}}
            if not taints:
                body["spec"].pop("taints")
            self.store.put("nodes", body)

    def _note_node_change(self, old: Obj, new: Obj) -> None:
        was, now = bool(old["spec"].get("unschedulable")), bool(new["spec"].get("unschedulable"))
        if was != now:
            reason = "NodeNotSchedulable" if now else "NodeSchedulable"
            name = new["metadata"]["name"]
            self._emit(
                new, reason, f"Node {name} status is now: {reason}", component="kubelet", host=name
            )

    def delete(
        self,
        resource: str,
        namespace: str,
        name: str,
        *,
        uid: str | None = None,
        dry_run: bool = False,
        grace: int | None = None,
    ) -> Obj:
        """Delete an object; a pod may first stay Terminating (`termination_seconds`)."""
        with self.store.lock:
            obj = self.get(resource, namespace, name)
            if uid is not None and obj["metadata"]["uid"] != uid:
                raise Conflict(
                    f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                    f"{obj['metadata']['uid']}"
                )
            if dry_run:
                return obj
            if resource == "pods" and grace != 0 and self.options.termination_seconds > 0:
                if obj["metadata"].get("deletionTimestamp"):
                    return obj
                return self._start_terminating(obj)
            self._terminating.pop((namespace, name), None)
            gone = self.store.delete(resource, namespace, name)
            assert gone is not None
            if resource == "pods":
                self._pod_gone(gone)
            if resource == dra.RULES:
                self._apply_device_taints()
            return gone

    def _start_terminating(self, pod: Obj) -> Obj:
        pod = copy.deepcopy(pod)
        meta = pod["metadata"]
        meta["deletionTimestamp"] = ko.rfc3339(self.clock.now())
        meta["deletionGracePeriodSeconds"] = int(
            pod["spec"].get("terminationGracePeriodSeconds", 30)
        )
        due = self.clock.scenario_time() + self.options.termination_seconds
        self._terminating[(meta["namespace"], meta["name"])] = (meta["uid"], due)
        return self.store.put("pods", pod)

    def _reap(self, now: float) -> None:
        """Terminating pods whose time is up are gone (their controllers then replace them)."""
        for key, (uid, due) in list(self._terminating.items()):
            if due > now:
                continue
            del self._terminating[key]
            pod = self.store.get("pods", *key)
            if pod is not None and pod["metadata"]["uid"] == uid:
                gone = self.store.delete("pods", *key)
                if gone is not None:
                    self._pod_gone(gone)

    def _pod_gone(self, pod: Obj) -> None:
        now = self.clock.scenario_time()
        owners = pod["metadata"].get("ownerReferences") or [{}]
        if owners[0].get("kind") == "DaemonSet":
            ds = self.store.get("daemonsets", ko.GPU_NAMESPACE, owners[0]["name"])
            if ds is not None and self.store.get("nodes", "", pod["spec"]["nodeName"]) is not None:
                fresh = kp.daemon_pod(ds, pod["spec"]["nodeName"], self.clock.now())
                fresh["status"]["hostIP"] = fresh["status"]["podIP"] = pod["status"].get(
                    "hostIP", ""
                )
                self.store.put("pods", fresh)
        else:
            self._emit(
                pod,
                "Killing",
                f"Stopping container {pod['spec']['containers'][0]['name']}",
                component="kubelet",
                host=pod["spec"].get("nodeName"),
            )
            self.controller.replace_pod(pod, now)
        self.tick()

    def evict(
        self, namespace: str, name: str, *, dry_run: bool = False, uid: str | None = None
    ) -> None:
        """policy/v1 Eviction: delete the pod unless a PodDisruptionBudget forbids it (429).

        A `deleteOptions.preconditions.uid` naming another incarnation of the pod (the job
        controller recreated it under the same name) is a 409 Conflict, as in the real API.
        """
        with self.store.lock:
            self.tick()
            pod = self.get("pods", namespace, name)
            if uid is not None and pod["metadata"].get("uid") != uid:
                raise Conflict(
                    f"Precondition failed: UID in precondition: {uid}, "
                    f"UID in object meta: {pod['metadata'].get('uid')}"
                )
            if pod["metadata"].get("deletionTimestamp"):
                return
            check_eviction(self.store, pod, self.controller.replicas)
            if not dry_run:
                self._emit(pod, "Evicted", "Evicted by the eviction API", component="gpufleet-sim")
                self.delete("pods", namespace, name)

    def _emit(
        self,
        obj: Obj,
        reason: str,
        message: str,
        *,
        type_: str = "Normal",
        component: str = "gpufleet-sim",
        host: str | None = None,
    ) -> None:
        ns = obj["metadata"].get("namespace") or "default"
        ev = ko.event_object(
            namespace=ns,
            involved=obj,
            reason=reason,
            message=message,
            ts=self.clock.now(),
            type_=type_,
            component=component,
            host=host,
        )
        self.store.put("events", ev)
        self._emitted.append((ns, ev["metadata"]["name"]))
        while len(self._emitted) > MAX_EVENTS:  # like the API server's event TTL, by count
            self.store.delete("events", *self._emitted.popleft())

    def set_node_ready(self, node: str, ready: bool | None) -> None:
        """Set a node's Ready condition (a test or a scenario fault marking it NotReady); None:
        Unknown, the kubelet stopped posting status (the node is unreachable)."""
        status = {True: "True", False: "False", None: "Unknown"}[ready]
        reason = {True: "KubeletReady", False: "KubeletNotReady", None: "NodeStatusUnknown"}[ready]
        with self.store.lock:
            obj = copy.deepcopy(self.get("nodes", "", node))
            for c in obj["status"]["conditions"]:
                if c["type"] == "Ready":
                    c["status"], c["reason"] = status, reason
                    c["lastTransitionTime"] = ko.rfc3339(self.clock.now())
            self.write("nodes", obj)

    def close(self) -> None:
        self.store.close()


def _key(resource: str, obj: Obj) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return (resource, str(meta.get("namespace", "")), str(meta["name"]))


__all__ = [
    "ClusterOptions",
    "Conflict",
    "Invalid",
    "NotFound",
    "SimCluster",
    "TooManyRequests",
]
