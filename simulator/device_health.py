"""What the NVIDIA device plugin does when a GPU fails: the Kubernetes side of a GPU fault.

On a critical XID the device plugin marks the device Unhealthy: the node's allocatable
`nvidia.com/gpu` drops by one and the scheduler no longer hands that GPU out, while pods already
on it keep running (removing them is remediation's job). This module says which devices are
unhealthy at a scenario time, so the simulated cluster shows the same fault the metrics show.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from simulator.kube_api.object_store import ObjectStore
from simulator.kube_api.objects import GPU
from simulator.layout import Layout
from simulator.scenario import FaultKind, Scenario
from simulator.targets import ResolvedFault, resolve_faults

UNHEALTHY_XID = {
    FaultKind.XID79_FALLEN_OFF_BUS: (79, "GPU has fallen off the bus"),
    FaultKind.XID48_DBE: (48, "double bit ECC error"),
    FaultKind.ROW_REMAP_FAILURE: (64, "row remapping failure"),
}
"""Faults whose XID the device plugin treats as fatal for the device (code, description)."""


@dataclass(frozen=True, slots=True)
class DeviceFault:
    node: str
    device: int
    uuid: str
    xid: int
    what: str
    start: float
    end: float


def device_faults(scenario: Scenario, layout: Layout) -> tuple[DeviceFault, ...]:
    out: list[DeviceFault] = []
    resolved: tuple[ResolvedFault, ...] = resolve_faults(scenario, layout)
    for f in resolved:
        if f.kind not in UNHEALTHY_XID or f.node is None or f.device is None or f.gpu < 0:
            continue
        xid, what = UNHEALTHY_XID[f.kind]
        uuid = str(layout.gpu_uuid[f.gpu])
        out.append(DeviceFault(f.node, f.device, uuid, xid, what, f.start, f.end))
    return tuple(out)


def unhealthy_at(
    faults: tuple[DeviceFault, ...],
    t: float,
    repaired: Mapping[tuple[str, int], float] | None = None,
) -> dict[tuple[str, int], DeviceFault]:
    """(node, device) -> the fault that makes it unhealthy at scenario time `t`; a fault that
    started before the device's last repair (a reset or reboot that fixed it) is over."""
    fixed = repaired or {}
    return {
        (f.node, f.device): f
        for f in faults
        if f.start <= t < f.end and f.start > fixed.get((f.node, f.device), -math.inf)
    }


def gpu_allocatable_at(faults: tuple[DeviceFault, ...], layout: Layout, t: float) -> dict[str, int]:
    """Node -> allocatable `nvidia.com/gpu` at `t` (no repairs): capacity minus Unhealthy
    devices, for the kube-state-metrics series of a backfill."""
    bad: dict[str, int] = {}
    for node, _ in unhealthy_at(faults, t):
        bad[node] = bad.get(node, 0) + 1
    return {n.name: max(0, n.gpus - bad.get(n.name, 0)) for n in layout.nodes}


class DevicePlugin:
    """Keeps each node's allocatable `nvidia.com/gpu` and health events in step with faults."""

    def __init__(
        self, store: ObjectStore, faults: tuple[DeviceFault, ...], emit: Callable[..., None]
    ) -> None:
        self.store = store
        self.faults = faults
        self.emit = emit
        self.unhealthy: dict[tuple[str, int], DeviceFault] = {}
        self.repaired: dict[tuple[str, int], float] = {}
        """(node, device) -> scenario time of its last successful reset or reboot."""

    def repair(self, node: str, device: int, t: float) -> None:
        """The device was reset (or its node rebooted) at `t`: faults begun before are over."""
        self.repaired[(node, device)] = t
        self.update(t)

    def persisting(self, node: str, devices: Collection[int] | None) -> DeviceFault | None:
        """The fault still on one of these devices of `node` (None: all of them), if any."""
        for (n, d), f in sorted(self.unhealthy.items()):
            if n == node and (devices is None or d in devices):
                return f
        return None

    def recently_fixed(
        self, node: str, devices: Collection[int] | None, t: float, window: float
    ) -> tuple[DeviceFault, float] | None:
        """A hard fault on these devices that a reset or reboot cleared less than `window`
        seconds before `t`, with the time of that repair (the GPU may still be marginal)."""
        for f in self.faults:
            if f.node != node or (devices is not None and f.device not in devices):
                continue
            fixed = self.repaired.get((f.node, f.device))
            if fixed is not None and f.start <= fixed <= t < fixed + window:
                return f, fixed
        return None

    def update(self, t: float) -> None:
        """Apply health changes due by scenario time `t` (call under the store lock)."""
        if not self.faults:
            return
        now = unhealthy_at(self.faults, t, self.repaired)
        if now.keys() == self.unhealthy.keys():
            return
        changed = {k[0] for k in now.keys() ^ self.unhealthy.keys()}
        for key in now.keys() - self.unhealthy.keys():
            self._event(now[key], healthy=False)
        for key in self.unhealthy.keys() - now.keys():
            self._event(self.unhealthy[key], healthy=True)
        self.unhealthy = now
        for name in sorted(changed):
            node = self.store.get("nodes", "", name)
            if node is None:
                continue
            node = copy.deepcopy(node)
            capacity = int(node["status"]["capacity"].get(GPU, "0"))
            bad = sum(1 for n, _ in now if n == name)
            node["status"]["allocatable"][GPU] = str(max(0, capacity - bad))
            self.store.put("nodes", node)

    def _event(self, f: DeviceFault, *, healthy: bool) -> None:
        node = self.store.get("nodes", "", f.node)
        if node is None:
            return
        if healthy:
            msg = f"GPU {f.device} ({f.uuid}) is healthy again after XID {f.xid}"
            self.emit(node, "GpuHealthy", msg, component="nvidia-device-plugin", host=f.node)
        else:
            msg = f"XID {f.xid} ({f.what}) on GPU {f.device} ({f.uuid}): marked Unhealthy"
            self.emit(
                node,
                "GpuUnhealthy",
                msg,
                type_="Warning",
                component="nvidia-device-plugin",
                host=f.node,
            )
