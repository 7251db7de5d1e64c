"""GPU resets and node reboots in the simulated cluster: what the node does when gpufleet asks.

A reset Job (`gpufleet.io/repair: reset-gpu`, the GPU by `gpufleet.io/gpu-index` or
`gpufleet.io/gpu-uuid`) fails while a pod holds the GPU (nvidia-smi refuses a GPU in use), when
the GPU has fallen off the bus (XID 79), or when the scenario lists it in `reset_failures`;
otherwise the GPU's faults are over (the device plugin reports it healthy again, and the metric
engine, through `on_repair`, stops its XID).

The reboot daemon honours gpufleet's node-agent contract (docs/remediation.md): a node whose
`gpufleet.io/reboot-required` value ends in its running bootID, or whose sentinel file a reboot
sentinel Job wrote, reboots: NotReady for `scenario.reboot_seconds`, its workload pods gone (their
controllers recreate them elsewhere), then Ready with a new `status.nodeInfo.bootID`, the file
gone (a tmpfs) and its GPU faults over unless the scenario lists it in `reboot_keeps_faults`.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from simulator.controller import JobController
from simulator.device_health import DevicePlugin
from simulator.kube_api import objects as ko
from simulator.kube_api.object_store import Expired, ObjectStore
from simulator.layout import Layout
from simulator.scenario import Scenario

Obj = dict[str, Any]
REBOOT_MARKER = "gpufleet.io/reboot-required"
"""The node-agent contract's annotation: `<action id>:<boot id>` (remediations.types)."""
INDEX_LABEL = "gpufleet.io/gpu-index"
UUID_LABEL = "gpufleet.io/gpu-uuid"
IN_USE = (
    "Unable to reset this GPU because it's being used by some other process "
    "(pod {pod}). Please first kill all processes using this GPU."
)


def _draw(seed: int, node: str, device: int, job: str) -> float:
    """A uniform draw in [0, 1) fixed by its inputs (the same Job reads the same outcome)."""
    h = hashlib.sha256(f"{seed}/{node}/{device}/{job}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2.0**64


class Repairs:
    """Reset Jobs' effects and the reboot daemon; `tick` runs under the store lock."""

    def __init__(
        self,
        store: ObjectStore,
        scenario: Scenario,
        layout: Layout,
        controller: JobController,
        devices: DevicePlugin,
        *,
        now: Callable[[], float],
        wall: Callable[[], float],
        emit: Callable[..., None],
        delete_pod: Callable[[str, str], object],
    ) -> None:
        self.store = store
        self.scenario = scenario
        self.layout = layout
        self.controller = controller
        self.devices = devices
        self.now = now
        self.wall = wall
        self.emit = emit
        self.delete_pod = delete_pod
        self.on_repair: list[Callable[[str, int, float], None]] = []
        """Called with (node, device, scenario time) after each fix (the metric engine)."""
        self.on_boot: list[Callable[[str, float], None]] = []
        """Called with (node, scenario time) when a node is back from a reboot (its exporter
        restarted)."""
        self.rebooting: dict[str, float] = {}
        """Node -> scenario time it is back."""
        self.sentinel: set[str] = set()
        """Nodes whose /var/run/reboot-required a sentinel Job wrote."""
        self.boots: dict[str, int] = {}
        self._seen = -1

    # ---- reset and sentinel Jobs (simulator.batch_jobs.RepairHooks) --------------------------

    def run(self, kind: str, node: str, labels: Mapping[str, str]) -> str | None:
        if kind == "reboot-sentinel":
            self.sentinel.add(node)
            return None
        if kind != "reset-gpu":
            return f"unknown repair {kind!r}"
        device = self._device(node, labels)
        if device is None:
            return f"No GPU {labels.get(UUID_LABEL) or labels.get(INDEX_LABEL)} on {node}"
        holders = self.controller.pods_on_device(node, device)
        if holders:
            m = holders[0]["metadata"]
            return IN_USE.format(pod=f"{m['namespace']}/{m['name']}")
        fault = self.devices.unhealthy.get((node, device))
        if fault is not None and fault.xid == 79:
            return f"GPU {device} has fallen off the bus (XID 79): a reset cannot reach it"
        if f"{node}/{device}" in self.scenario.reset_failures:
            return f"GPU {device} reset failed: the GPU did not come back healthy"
        self._fixed(node, (device,))
        return None

    def diagnose(self, node: str, gpus: list[int] | None, job: str) -> str | None:
        """What `dcgmi diag` finds on these GPUs of `node` (None: all): why it fails, or None.

        A fault that persists fails it (uncorrected DBEs without a reset, a failed row remap, a
        GPU fallen off the bus); for `diagnostic_flaky_seconds` after a reset or reboot cleared
        a hard fault, it fails with probability `diagnostic_flake_rate` (seeded per scenario,
        node, GPU and Job, so a run is reproducible)."""
        t = self.now()
        f = self.devices.persisting(node, gpus)
        if f is not None:
            return f"dcgmi diag: GPU {f.device} failed: {f.what} (XID {f.xid}) persists"
        sc = self.scenario
        if sc.diagnostic_flake_rate <= 0:
            return None
        hit = self.devices.recently_fixed(node, gpus, t, sc.diagnostic_flaky_seconds)
        if hit is None:
            return None
        f, fixed = hit
        if _draw(sc.seed, node, f.device, job) >= sc.diagnostic_flake_rate:
            return None
        return (
            f"dcgmi diag: GPU {f.device} failed the memory stress test intermittently "
            f"({t - fixed:.0f}s after the repair of {f.what})"
        )

    def _device(self, node: str, labels: Mapping[str, str]) -> int | None:
        raw = labels.get(INDEX_LABEL, "")
        pos = self.layout.node_position().get(node)
        if pos is None:
            return None
        on_node = self.layout.gpu_node == pos
        if raw.isdigit():
            return int(raw) if (on_node & (self.layout.gpu_device == int(raw))).any() else None
        hits = (self.layout.gpu_uuid == labels.get(UUID_LABEL, "")) & on_node
        return int(self.layout.gpu_device[hits.argmax()]) if hits.any() else None

    def _fixed(self, node: str, devices: tuple[int, ...]) -> None:
        t = self.now()
        for d in devices:
            self.devices.repair(node, d, t)
            for hook in self.on_repair:
                hook(node, d, t)

    # ---- the reboot daemon -----------------------------------------------------------------

    def tick(self) -> None:
        t = self.now()
        for name, due in sorted(self.rebooting.items()):
            if t >= due:
                self._boot(name)
        for name in sorted(self._touched() | self.sentinel):
            node = self.store.get("nodes", "", name)
            if node is None or name in self.rebooting:
                continue
            marker = (node["metadata"].get("annotations") or {}).get(REBOOT_MARKER, "")
            boot = node["status"]["nodeInfo"]["bootID"]
            if name in self.sentinel or (marker and marker.rsplit(":", 1)[-1] == boot):
                self._shut_down(node, t)

    def _touched(self) -> set[str]:
        """Nodes written since the last look (all of them when the history no longer reaches)."""
        changed = self.store.changed_at("nodes")
        if changed == self._seen:
            return set()
        try:
            events = self.store.events_since("nodes", self._seen)
            names = {str(e.obj["metadata"]["name"]) for e in events if e.type != "DELETED"}
        except Expired:
            names = {str(n["metadata"]["name"]) for n in self.store.objects("nodes")[1]}
        self._seen = changed
        return names

    def _shut_down(self, node: Obj, t: float) -> None:
        name = node["metadata"]["name"]
        self.rebooting[name] = t + self.scenario.reboot_seconds
        self.sentinel.discard(name)
        self._set_ready(node, False, "node is rebooting (reboot daemon)")
        self.emit(node, "NodeNotReady", f"Node {name} status is now: NodeNotReady", host=name)
        for pod in [p for p in self.store.objects("pods")[1] if p["spec"].get("nodeName") == name]:
            owners = pod["metadata"].get("ownerReferences") or [{}]
            if owners[0].get("kind") != "DaemonSet":
                self.delete_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])

    def _boot(self, name: str) -> None:
        del self.rebooting[name]
        self.sentinel.discard(name)  # /var/run is a tmpfs: whatever was written there is gone
        node = self.store.get("nodes", "", name)
        if node is None:
            return
        self.boots[name] = self.boots.get(name, 0) + 1
        node = copy.deepcopy(node)
        node["status"]["nodeInfo"]["bootID"] = ko.new_uid(
            f"{self.scenario.cluster}/boot/{name}/{self.boots[name]}"
        )
        boot = node["status"]["nodeInfo"]["bootID"]
        for hook in self.on_boot:
            hook(name, self.now())
        self._set_ready(node, True, "kubelet is posting ready status")
        self.emit(
            node,
            "Rebooted",
            f"Node {name} has been rebooted, boot id: {boot}",
            type_="Warning",
            component="kubelet",
            host=name,
        )
        if name not in self.scenario.reboot_keeps_faults:
            pos = self.layout.node_position()[name]
            devices = tuple(int(d) for d in self.layout.gpu_device[self.layout.gpu_node == pos])
            self._fixed(name, devices)

    def _set_ready(self, node: Obj, ready: bool, message: str) -> None:
        node = copy.deepcopy(node)
        for c in node["status"]["conditions"]:
            if c["type"] == "Ready":
                c["status"] = "True" if ready else "False"
                c["reason"] = "KubeletReady" if ready else "KubeletNotReady"
                c["message"] = message
                c["lastTransitionTime"] = ko.rfc3339(self.wall())
        self.store.put("nodes", node)
