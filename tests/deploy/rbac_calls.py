"""The Kubernetes API calls gpufleet's code makes, read from its source: (group, resource, verb).

Every module of the product packages that imports the `kubernetes` client is an adapter (the
import contracts allow only those). In each, an attribute `X.method` on an object built from a
`kubernetes.client.*Api` class (`self.core = client.CoreV1Api(api)`, then `self.core.patch_node`)
is a call of that API; a module that streams with `watch.Watch` also watches every resource it
lists. The method names follow the client's generator: `<verb>_[namespaced_]<kind>[_<sub>]
[_for_all_namespaces]`, e.g. `create_namespaced_pod_eviction` -> ("", "pods/eviction", "create").
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import kubernetes.client

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "errors", "database", "observer", "detectors", "remediations", "kube", "backtesting", "lab",
    "simulator", "alerts",
    "dashboards", "metering", "gpufleet",
)  # fmt: skip
GROUPS = {
    "CoreV1Api": "",
    "CoordinationV1Api": "coordination.k8s.io",
    "BatchV1Api": "batch",
    "PolicyV1Api": "policy",
    "AppsV1Api": "apps",
    "EventsV1Api": "events.k8s.io",
    "ResourceV1Api": "resource.k8s.io",
    "AuthorizationV1Api": "authorization.k8s.io",
}
VERBS = (
    ("delete_collection_", "deletecollection"),
    ("list_", "list"),
    ("read_", "get"),
    ("patch_", "patch"),
    ("create_", "create"),
    ("delete_", "delete"),
    ("replace_", "update"),
)
SUBRESOURCES = ("status", "eviction", "log", "scale", "binding", "exec", "attach", "proxy")
Rule = tuple[str, str, str]
"""(apiGroup, resource, verb)"""


def _plural(kind: str) -> str:
    word = kind.replace("_", "")
    if word.endswith("y"):
        return word[:-1] + "ies"
    if word.endswith("s"):
        return word + "es"
    return word + "s"


def rule_of(api_class: str, method: str) -> Rule:
    group = GROUPS[api_class]  # KeyError: add the API class's group above
    found = next(((p, v) for p, v in VERBS if method.startswith(p)), None)
    if found is None:
        raise ValueError(f"{api_class}.{method}: not a resource call")
    prefix, verb = found
    rest = method.removeprefix(prefix)
    rest = rest.removeprefix("namespaced_").removesuffix("_for_all_namespaces")
    sub = ""
    for s in SUBRESOURCES:
        if rest.endswith("_" + s):
            rest, sub = rest.removesuffix("_" + s), s
            break
    resource = _plural(rest) + (f"/{sub}" if sub else "")
    return group, resource, verb


def adapter_modules() -> list[Path]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if re.search(r"^\s*(from kubernetes[ .]|import kubernetes)", text, re.M):
                out.append(path)
    return out


def _api_objects(tree: ast.AST) -> dict[str, str]:
    """Name (`core` for `self.core`, or a plain variable) -> kubernetes API class name."""
    objects: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            # `core: client.CoreV1Api` as a parameter: the wing's reader, writer and evictions
            # are handed the API objects the actuator built
            ann = node.annotation
            cls = ann.attr if isinstance(ann, ast.Attribute) else getattr(ann, "id", "")
            if re.fullmatch(r"[A-Z]\w*V\d\w*Api", cls):
                objects[node.arg] = cls
            continue
        if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
            continue
        call = node.value
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            # `rules: client.ResourceV1Api = self._rules()`: the annotation names the API class
            ann = node.annotation
            cls = ann.attr if isinstance(ann, ast.Attribute) else getattr(ann, "id", "")
            if re.fullmatch(r"[A-Z]\w*V\d\w*Api", cls):
                objects[node.target.id] = cls
                continue
        if not isinstance(call, ast.Call):
            continue
        func = call.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if not re.fullmatch(r"[A-Z]\w*V\d\w*Api", name):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            if isinstance(t, ast.Attribute):
                objects[t.attr] = name
            elif isinstance(t, ast.Name):
                objects[t.id] = name
    return objects


def _references(tree: ast.AST, objects: dict[str, str]) -> Iterator[tuple[str, str]]:
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        recv = node.value
        key = recv.attr if isinstance(recv, ast.Attribute) else getattr(recv, "id", None)
        if key in objects:
            cls = objects[key]
            if callable(getattr(getattr(kubernetes.client, cls), node.attr, None)):
                yield cls, node.attr


def calls_of(path: Path) -> set[Rule]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    rules = {rule_of(cls, m) for cls, m in _references(tree, _api_objects(tree))}
    uses_watch = any(
        isinstance(n, ast.Attribute) and n.attr == "Watch" and getattr(n.value, "id", "") == "watch"
        for n in ast.walk(tree)
    )
    if uses_watch:
        rules |= {(g, r, "watch") for g, r, v in rules if v == "list"}
    return rules


def code_rules() -> dict[Path, set[Rule]]:
    return {p: calls_of(p) for p in adapter_modules()}
