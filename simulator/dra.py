"""Dynamic Resource Allocation in the simulated cluster: the NVIDIA DRA driver's ResourceSlices
and the device taints that `resource.k8s.io/v1` DeviceTaintRules put on them.

Each GPU node publishes one ResourceSlice of driver `gpu.nvidia.com` whose pool is the node's
name and whose devices are `gpu-0`..`gpu-<n-1>`, with the attributes the real driver publishes
(`index`, `uuid`, `productName`, `pciBusID`, ...). The `uuid` is the one the simulated DCGM
exporters report for that GPU, so a finding's GPU maps to exactly one device. A DeviceTaintRule
selects devices by driver, pool and device name (every field that is set must match; an empty
selector matches every device); its effect decides what the simulated scheduler and taint
eviction controller do: `None` nothing, `NoSchedule` keep new pods off the device, `NoExecute`
also evict the pods that hold it. Which pods hold a device is what real clients read from
ResourceClaims: each GPU pod gets one (`<pod>-gpu-<suffix>`, owned by the pod) allocated its
devices and reserved for it, deleted when the pod is gone or done.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import Any

from simulator.kube_api import objects as ko
from simulator.layout import MODEL_NAME, Layout, SimNode
from simulator.series import DRIVER_VERSION

Obj = dict[str, Any]
DRIVER = "gpu.nvidia.com"
SLICES = "resourceslices"
RULES = "devicetaintrules"
EFFECTS = ("None", "NoSchedule", "NoExecute")
BLOCKING = frozenset({"NoSchedule", "NoExecute"})
_ARCH = {"A100": "Ampere", "H100": "Hopper", "H200": "Hopper"}
_CC = {"A100": "8.0.0", "H100": "9.0.0", "H200": "9.0.0"}


def device_name(index: int) -> str:
    return f"gpu-{index}"


def device_index(name: str) -> int | None:
    head, _, tail = name.partition("-")
    return int(tail) if head == "gpu" and tail.isdigit() else None


def slice_name(node: str) -> str:
    return f"{node}-{DRIVER}"


def resource_slice(layout: Layout, n: SimNode, ts: float, cluster: str) -> Obj:
    """The ResourceSlice the NVIDIA DRA driver on node `n` publishes."""
    devices: list[Obj] = []
    for d in range(n.gpus):
        row = layout.gpu_position(n.name, d)
        devices.append(
            {
                "name": device_name(d),
                "attributes": {
                    "type": {"string": "gpu"},
                    "index": {"int": d},
                    "uuid": {"string": str(layout.gpu_uuid[row])},
                    "productName": {"string": MODEL_NAME.get(n.model, n.model)},
                    "brand": {"string": "Nvidia"},
                    "architecture": {"string": _ARCH.get(n.model, "Unknown")},
                    "cudaComputeCapability": {"version": _CC.get(n.model, "0.0.0")},
                    "driverVersion": {"version": DRIVER_VERSION},
                    "pciBusID": {"string": str(layout.gpu_pci[row]).lower()[4:]},
                },
                "capacity": {"memory": {"value": "80Gi"}},
            }
        )
    meta = ko.object_meta(
        slice_name(n.name), ts, uid=ko.new_uid(f"{cluster}/resourceslice/{n.name}")
    )
    meta["generation"] = 1
    meta["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "name": n.name,
            "uid": ko.new_uid(f"{cluster}/node/{n.name}"),
            "controller": True,
        }
    ]
    return {
        "kind": "ResourceSlice",
        "apiVersion": "resource.k8s.io/v1",
        "metadata": meta,
        "spec": {
            "driver": DRIVER,
            "nodeName": n.name,
            "pool": {"name": n.name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def check_rule(rule: Obj) -> str | None:
    """Why the API server would reject this DeviceTaintRule (None: it is valid)."""
    spec = rule.get("spec")
    if not isinstance(spec, dict):
        return "spec: Required value"
    taint = spec.get("taint")
    if not isinstance(taint, dict) or not taint.get("key"):
        return "spec.taint.key: Required value"
    if taint.get("effect") not in EFFECTS:
        return (
            f'spec.taint.effect: Unsupported value: "{taint.get("effect")}": supported values: '
            + ", ".join(f'"{e}"' for e in EFFECTS)
        )
    sel = spec.get("deviceSelector")
    if sel is not None and not isinstance(sel, dict):
        return "spec.deviceSelector: Invalid value: must be an object"
    return None


def _matches(sel: Obj | None, driver: str, pool: str, device: str) -> bool:
    if sel is None:
        return False  # without a selector, no devices are matched
    want = (sel.get("driver"), sel.get("pool"), sel.get("device"))
    return all(w is None or w == v for w, v in zip(want, (driver, pool, device), strict=True))


def device_taints(slices: Iterable[Obj], rules: Iterable[Obj]) -> dict[tuple[str, int], Obj]:
    """(node, device index) -> the strongest taint the rules put on that device."""
    rank = {e: i for i, e in enumerate(EFFECTS)}
    devices = [
        (s["spec"]["nodeName"], s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"])
        for s in slices
        for d in s["spec"].get("devices") or ()
    ]
    out: dict[tuple[str, int], Obj] = {}
    for rule in rules:
        spec = rule.get("spec") or {}
        taint = spec.get("taint") or {}
        for node, driver, pool, name in devices:
            idx = device_index(name)
            if idx is None or not _matches(spec.get("deviceSelector"), driver, pool, name):
                continue
            old = out.get((node, idx))
            new_rank = rank.get(str(taint.get("effect")), 0)
            if old is None or new_rank > rank.get(str(old.get("effect")), 0):
                out[(node, idx)] = taint
    return out


# --- ResourceClaims -------------------------------------------------------------------------------

CLAIMS = "resourceclaims"
REQUEST = "gpu"
"""The name of the pod's claim (`spec.resourceClaims[].name`) and of the claim's one request."""
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"


def claim_name(pod_name: str, pod_uid: str) -> str:
    """`<pod>-<claim>-<5 chars>`, as the ResourceClaim controller names a template's claim (the
    suffix derives from the pod's uid here, so a recreated pod of the same name gets a new one)."""
    h = zlib.crc32(pod_uid.encode())
    suffix = "".join(_NAME_CHARS[(h >> (5 * i)) % len(_NAME_CHARS)] for i in range(5))
    return f"{pod_name[: 63 - len(REQUEST) - 7]}-{REQUEST}-{suffix}"


def resource_claim(pod: Obj, node: str, devices: Iterable[int], ts: float) -> Obj:
    """The ResourceClaim generated for `pod` from its claim template, allocated `devices` of
    `node` by the scheduler and reserved for the pod (what `resource.k8s.io/v1` returns)."""
    pm = pod["metadata"]
    names = [device_name(d) for d in devices]
    meta = ko.object_meta(claim_name(pm["name"], pm["uid"]), ts, pm["namespace"])
    meta["annotations"] = {POD_CLAIM_ANNOTATION: REQUEST}
    meta["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    meta["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pm["name"],
            "uid": pm["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    request = {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": len(names)}
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {
        "kind": "ResourceClaim",
        "apiVersion": "resource.k8s.io/v1",
        "metadata": meta,
        "spec": {"devices": {"requests": [{"name": REQUEST, "exactly": request}]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": REQUEST, "driver": DRIVER, "pool": node, "device": n}
                        for n in names
                    ]
                },
                "nodeSelector": {"nodeSelectorTerms": [term]},
                "allocationTimestamp": ko.rfc3339(ts),
            },
            "reservedFor": [{"resource": "pods", "name": pm["name"], "uid": pm["uid"]}],
        },
    }


def claimed_devices(claim: Obj) -> list[tuple[str, int]]:
    """(pool, device index) of every `gpu.nvidia.com` device allocated to `claim`."""
    alloc = (claim.get("status") or {}).get("allocation") or {}
    out = []
    for r in (alloc.get("devices") or {}).get("results") or ():
        idx = device_index(str(r.get("device", "")))
        if r.get("driver") == DRIVER and idx is not None:
            out.append((str(r.get("pool", "")), idx))
    return out
