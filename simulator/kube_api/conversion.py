"""Objects as an older API version returns them: the store keeps `resource.k8s.io/v1`.

A real server stores one version and converts on the way out. ResourceSlices and ResourceClaims
read the same at v1beta2 and v1; at v1beta1 a device's attributes and capacity sit under
`basic`, and a claim's request names its device class directly instead of under `exactly`.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def _slice_v1beta1(obj: Obj) -> Obj:
    spec = dict(obj.get("spec") or {})
    spec["devices"] = [
        {"name": d["name"], "basic": {k: v for k, v in d.items() if k != "name"}}
        for d in spec.get("devices") or ()
    ]
    return {**obj, "spec": spec}


def _claim_v1beta1(obj: Obj) -> Obj:
    spec = dict(obj.get("spec") or {})
    devices = dict(spec.get("devices") or {})
    devices["requests"] = [
        {"name": r["name"], **(r.get("exactly") or {})} for r in devices.get("requests") or ()
    ]
    spec["devices"] = devices
    return {**obj, "spec": spec}


_V1BETA1 = {"resourceslices": _slice_v1beta1, "resourceclaims": _claim_v1beta1}


def to_version(plural: str, group: str, version: str, obj: Obj) -> Obj:
    """`obj` (stored at v1) as `group/version` serves it."""
    if group == "resource.k8s.io" and version == "v1beta1" and plural in _V1BETA1:
        return _V1BETA1[plural](obj)
    return obj
