"""Which resources the simulated API server serves, and the discovery documents that say so.

Clients find resources before using them: kubectl reads `/api`, `/apis` and each group version's
APIResourceList (drain checks that `pods/eviction` exists in group `policy` before it evicts), and
the Python client needs nothing but the paths. One registry drives both routing and discovery.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

SERVER_VERSION = {
    "major": "1",
    "minor": "37",
    "gitVersion": "v1.37.0-gpufleet-sim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.22.10",
    "compiler": "gc",
    "platform": "linux/amd64",
}

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
    Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False, READ),
    Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True, READ),
    Resource(
        "resource.k8s.io", "v1", "devicetaintrules", "DeviceTaintRule", False, (*READ, *WRITE)
    ),
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


def find(group: str, version: str, plural: str) -> Resource | None:
    for r in RESOURCES:
        if (r.group, r.version, r.plural) == (group, version, plural):
            return r
    return None


def resource_list(group: str, version: str) -> Obj | None:
    gv = f"{group}/{version}" if group else version
    items: list[Obj] = []
    for r in RESOURCES:
        if (r.group, r.version) != (group, version):
            continue
        item: Obj = {
            "name": r.plural,
            "singularName": r.kind.lower(),
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": list(r.verbs),
        }
        if r.short_names:
            item["shortNames"] = list(r.short_names)
        items.append(item)
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
    if not items:
        return None
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": items}


def api_versions(server_address: str) -> Obj:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def group(name: str) -> Obj:
    gv = {"groupVersion": f"{name}/v1", "version": "v1"}
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": name,
        "versions": [gv],
        "preferredVersion": gv,
    }


def group_list() -> Obj:
    groups = [
        {k: v for k, v in group(g).items() if k not in ("kind", "apiVersion")} for g in GROUPS
    ]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
