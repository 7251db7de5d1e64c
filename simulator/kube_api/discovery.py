"""Which resources the simulated API server serves, and the discovery documents that say so.

Clients find resources before using them: kubectl reads `/api`, `/apis` and each group version's
APIResourceList (drain checks that `pods/eviction` exists in group `policy` before it evicts), and
the Python client needs nothing but the paths. One registry drives both routing and discovery.

A `Profile` is one Kubernetes release (`kubernetes_version` 1.34 to 1.37): what `/version`
reports and which versions of `resource.k8s.io` serve DeviceTaintRules (KEP-5055: alpha in
v1alpha3 since 1.33, beta in v1beta2 in 1.36, GA in v1 in 1.37). Alpha and beta versions are
served only with the `DRADeviceTaints` gate and its runtime-config on (new beta APIs are off by
default, KEP-3136), so a client must discover before it writes one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

READ = ("get", "list", "watch")
WRITE = ("create", "update", "patch", "delete")


@dataclass(frozen=True, slots=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    verbs: tuple[str, ...]
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


RESOURCES = (
    Resource("", "v1", "nodes", "Node", False, (*READ, "update", "patch"), ("no",)),
    Resource("", "v1", "pods", "Pod", True, (*READ, "update", "patch", "delete"), ("po",)),
    Resource("", "v1", "events", "Event", True, (*READ, *WRITE), ("ev",)),
    Resource("", "v1", "namespaces", "Namespace", False, (*READ, "create"), ("ns",)),
    Resource(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        True,
        (*READ, *WRITE),
        ("pdb",),
    ),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", True, (*READ, *WRITE)),
    Resource("apps", "v1", "daemonsets", "DaemonSet", True, READ, ("ds",)),
    Resource("batch", "v1", "jobs", "Job", True, (*READ, *WRITE)),
    Resource(
        "authorization.k8s.io",
        "v1",
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
        False,
        ("create",),
    ),
    Resource(
        "authorization.k8s.io",
        "v1",
        "selfsubjectrulesreviews",
        "SelfSubjectRulesReview",
        False,
        ("create",),
    ),
)
REVIEWS = ("selfsubjectaccessreviews", "selfsubjectrulesreviews")
SUBRESOURCES = {
    ("", "v1", "pods/eviction"): ("policy", "v1", "Eviction", ("create",)),
    ("", "v1", "pods/status"): ("", "v1", "Pod", ("get", "patch", "update")),
    ("", "v1", "nodes/status"): ("", "v1", "Node", ("get", "patch", "update")),
}
GROUPS = (
    "policy", "coordination.k8s.io", "apps", "batch", "resource.k8s.io", "authorization.k8s.io",
)  # fmt: skip


KUBERNETES_VERSIONS = ("1.34", "1.35", "1.36", "1.37")
DEFAULT_VERSION = "1.37"
_STABILITY = ("v1", "v1beta2", "v1beta1", "v1alpha3")
DRA_VERSIONS = ("v1", "v1beta2", "v1beta1")
"""The `resource.k8s.io` versions that can serve ResourceSlices and ResourceClaims in 1.34-1.37:
v1 (GA in 1.34, on by default) and the deprecated betas, served only when the API server's
runtime-config enables them."""
"""Version order within a group, preferred first (what the real server's discovery prefers)."""


def device_taint_versions(kubernetes_version: str, gate: bool = False) -> tuple[str, ...]:
    """The versions of `resource.k8s.io` that serve DeviceTaintRule in that release, preferred
    first: v1 from 1.37; v1beta2 from 1.36 and v1alpha3 only with the gate on."""
    minor = int(kubernetes_version.split(".")[1])
    out = ["v1"] if minor >= 37 else []
    if gate and minor >= 36:
        out.append("v1beta2")
    if gate and minor >= 33:
        out.append("v1alpha3")
    return tuple(out)


def _rank(version: str) -> int:
    return _STABILITY.index(version) if version in _STABILITY else len(_STABILITY)


@dataclass(frozen=True, slots=True)
class Profile:
    """What one Kubernetes release serves: its resources, groups and `/version`."""

    kubernetes_version: str = DEFAULT_VERSION
    device_taint_gate: bool = False
    dra_versions: tuple[str, ...] = ("v1",)
    """The versions serving ResourceSlices and ResourceClaims (the runtime-config)."""

    def __post_init__(self) -> None:
        bad = sorted(set(self.dra_versions) - set(DRA_VERSIONS))
        if bad or not self.dra_versions:
            raise ValueError(
                f"dra_versions must be a non-empty subset of {', '.join(DRA_VERSIONS)}, "
                f"not {list(self.dra_versions)!r}"
            )
        if self.kubernetes_version not in KUBERNETES_VERSIONS:
            raise ValueError(
                f"kubernetes_version must be one of {', '.join(KUBERNETES_VERSIONS)}, "
                f"not {self.kubernetes_version!r}"
            )

    @property
    def resources(self) -> tuple[Resource, ...]:
        rules = tuple(
            Resource("resource.k8s.io", v, "devicetaintrules", "DeviceTaintRule", False,
                     (*READ, *WRITE))
            for v in device_taint_versions(self.kubernetes_version, self.device_taint_gate)
        )  # fmt: skip
        dra = tuple(
            Resource("resource.k8s.io", v, plural, kind, namespaced, READ)
            for v in sorted(self.dra_versions, key=_rank)
            for plural, kind, namespaced in (
                ("resourceslices", "ResourceSlice", False),
                ("resourceclaims", "ResourceClaim", True),
            )
        )
        return (*RESOURCES, *dra, *rules)

    def server_version(self) -> Obj:
        minor = self.kubernetes_version.split(".")[1]
        return {
            "major": "1",
            "minor": minor,
            "gitVersion": f"v1.{minor}.0-gpufleet-sim",
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.24.6",
            "compiler": "gc",
            "platform": "linux/amd64",
        }

    def find(self, group: str, version: str, plural: str) -> Resource | None:
        for r in self.resources:
            if (r.group, r.version, r.plural) == (group, version, plural):
                return r
        return None

    def versions(self, group: str) -> list[str]:
        """The versions of `group` served, preferred first (empty: not served)."""
        have = {r.version for r in self.resources if r.group == group}
        return sorted(have, key=_rank)

    def resource_list(self, group: str, version: str) -> Obj | None:
        gv = f"{group}/{version}" if group else version
        items: list[Obj] = []
        for r in self.resources:
            if (r.group, r.version) != (group, version):
                continue
            items += _items(r, group, version)
        if not items:
            return None
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                "resources": items}  # fmt: skip

    def group(self, name: str) -> Obj | None:
        versions = [{"groupVersion": f"{name}/{v}", "version": v} for v in self.versions(name)]
        if not name or not versions:
            return None
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": name,
            "versions": versions,
            "preferredVersion": versions[0],
        }

    def group_list(self) -> Obj:
        groups = [
            {k: v for k, v in doc.items() if k not in ("kind", "apiVersion")}
            for doc in (self.group(g) for g in GROUPS)
            if doc is not None
        ]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def _items(r: Resource, group: str, version: str) -> list[Obj]:
    """A resource's APIResourceList entries: itself and its subresources."""
    item: Obj = {
        "name": r.plural,
        "singularName": r.kind.lower(),
        "namespaced": r.namespaced,
        "kind": r.kind,
        "verbs": list(r.verbs),
    }
    if r.short_names:
        item["shortNames"] = list(r.short_names)
    items = [item]
    for (g, v, name), (sg, sv, kind, verbs) in SUBRESOURCES.items():
        if (g, v) == (group, version) and name.startswith(r.plural + "/"):
            sub: Obj = {
                "name": name,
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": kind,
                "verbs": list(verbs),
            }
            if (sg, sv) != (g, v):
                sub["group"], sub["version"] = sg, sv
            items.append(sub)
    return items


def api_versions(server_address: str) -> Obj:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }
