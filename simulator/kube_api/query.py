"""Selectors and patches as the Kubernetes API server understands them, for plain JSON objects.

Clients filter with `labelSelector` (equality and set-based) and `fieldSelector`
(`spec.nodeName=`, `metadata.name=`, ...), and write with three patch types: kubectl cordon sends a
strategic merge patch, controllers often send JSON merge patches, and some send RFC 6902 JSON
patches. Only the parts of these languages that clients of this simulator use are implemented,
but those parts follow the real semantics (e.g. `null` deletes a key in a merge patch).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

Obj = dict[str, Any]
Matcher = Callable[[Obj], bool]


class BadRequest(ValueError):
    """A selector or patch the server cannot parse (HTTP 400)."""


_KEY = re.compile(r"[A-Za-z0-9_./-]+")
_SET_EXPR = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_selector(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


LabelTest = Callable[[dict[str, str]], bool]


def _label_test(op: str, key: str, values: frozenset[str]) -> LabelTest:
    if op == "in":
        return lambda lb: lb.get(key) in values
    if op == "notin":
        return lambda lb: lb.get(key) not in values
    if op == "=":
        return lambda lb: lb.get(key) in values
    if op == "!=":
        return lambda lb: lb.get(key) not in values
    if op == "exists":
        return lambda lb: key in lb
    return lambda lb: key not in lb


def _label_requirement(part: str) -> LabelTest:
    m = _SET_EXPR.match(part)
    if m:
        values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
        return _label_test(m.group(2), m.group(1), values)
    if "!=" in part:
        key, val = (s.strip() for s in part.split("!=", 1))
        return _label_test("!=", key, frozenset([val]))
    if "=" in part:
        key, val = (s.strip() for s in part.replace("==", "=").split("=", 1))
        return _label_test("=", key, frozenset([val]))
    if part.startswith("!") and _KEY.fullmatch(part[1:].strip()):
        return _label_test("notexists", part[1:].strip(), frozenset())
    if _KEY.fullmatch(part):
        return _label_test("exists", part, frozenset())
    raise BadRequest(f"unable to parse requirement: {part!r}")


def label_matcher(selector: str | None) -> Matcher:
    """`a=b,c!=d,e in (x,y),f notin (z),g,!h` -> predicate over an object's labels."""
    if not selector:
        return lambda _obj: True
    tests = [_label_requirement(p) for p in _split_selector(selector)]

    def match(obj: Obj) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(t(labels) for t in tests)

    return match


def field_value(obj: Obj, path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def _field_test(path: str, value: str, equal: bool) -> Matcher:
    return lambda o: (field_value(o, path) == value) == equal


FIELD_LABELS: dict[str, frozenset[str]] = {
    "pods": frozenset({
        "spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
        "spec.hostNetwork", "status.phase", "status.podIP", "status.podIPs",
        "status.nominatedNodeName",
    }),
    "nodes": frozenset({"spec.unschedulable"}),
    "events": frozenset({
        "involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
        "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
        "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type",
    }),
    "jobs": frozenset({"status.successful"}),
    "namespaces": frozenset({"status.phase"}),
    "resourceslices": frozenset({"spec.nodeName", "spec.driver"}),
}  # fmt: skip
"""Field selectors each resource supports beside metadata.name and metadata.namespace (the
field label conversion funcs registered in pkg/apis/*/v1/conversion.go)."""


def check_field_selector(resource: str, selector: str | None) -> None:
    """400 for a field the real server cannot select on, as it answers before listing."""
    allowed = FIELD_LABELS.get(resource, frozenset()) | {"metadata.name", "metadata.namespace"}
    for part in _split_selector(selector or ""):
        key = part.replace("!=", "=").split("=", 1)[0].strip()
        if key and key not in allowed:
            raise BadRequest(f"field label not supported: {key}")


def field_matcher(selector: str | None) -> Matcher:
    """`spec.nodeName=n1,status.phase!=Succeeded,metadata.name==x` -> predicate."""
    if not selector:
        return lambda _obj: True
    tests: list[Matcher] = []
    for part in _split_selector(selector):
        if "!=" in part:
            path, val = (s.strip() for s in part.split("!=", 1))
            tests.append(_field_test(path, val, False))
        elif "=" in part:
            path, val = (s.strip() for s in part.replace("==", "=").split("=", 1))
            tests.append(_field_test(path, val, True))
        else:
            raise BadRequest(f"invalid field selector: {part!r}")
    return lambda obj: all(t(obj) for t in tests)


# --- patches -----------------------------------------------------------------------------------

MERGE_KEYS = {
    "conditions": "type",
    "containers": "name",
    "initContainers": "name",
    "ownerReferences": "uid",
    "addresses": "type",
    "volumes": "name",
    "env": "name",
    "tolerations": "key",
}
"""List fields a strategic merge patch merges element-wise, by this key (from the Go types)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (returns a new value)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    """Strategic merge patch: a merge patch whose known lists merge by key; directives honoured."""
    if isinstance(patch, list):
        key = MERGE_KEYS.get(field)
        if key is None or not isinstance(target, list):
            return [p for p in copy.deepcopy(patch) if not _is_directive(p)]
        out: list[Any] = copy.deepcopy(target)
        for item in patch:
            if not isinstance(item, dict) or key not in item:
                continue
            idx = next((i for i, t in enumerate(out) if t.get(key) == item[key]), None)
            if item.get("$patch") == "delete":
                if idx is not None:
                    out.pop(idx)
            elif idx is None:
                out.append(strategic_merge_patch({}, item))
            else:
                out[idx] = strategic_merge_patch(out[idx], item)
        return out
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: v for k, v in copy.deepcopy(patch).items() if k != "$patch"}
    merged: dict[str, Any] = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$"):
            continue  # $retainKeys, $setElementOrder/..., $deleteFromPrimitiveList/...
        if v is None:
            merged.pop(k, None)
        else:
            merged[k] = strategic_merge_patch(merged.get(k), v, k)
    return merged


def _is_directive(item: Any) -> bool:
    return isinstance(item, dict) and "$patch" in item


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise BadRequest(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve(doc: Any, parts: list[str]) -> Any:
    for p in parts:
        doc = doc[int(p)] if isinstance(doc, list) else doc[p]
    return doc


def json_patch(target: Obj, ops: Any) -> Obj:
    """RFC 6902 JSON patch: add, remove, replace, test, copy, move."""
    if not isinstance(ops, list):
        raise BadRequest("a JSON patch must be a list of operations")
    doc: Any = copy.deepcopy(target)
    try:
        for op in ops:
            name, parts = op["op"], _pointer(op["path"])
            if name == "test":
                if _resolve(doc, parts) != op["value"]:
                    raise BadRequest(f"test operation failed at {op['path']}")
                continue
            if name in ("copy", "move"):
                src = _pointer(op["from"])
                value = copy.deepcopy(_resolve(doc, src))
                if name == "move":
                    _remove(doc, src)
                _add(doc, parts, value)
            elif name == "add":
                _add(doc, parts, copy.deepcopy(op["value"]))
            elif name == "remove":
                _remove(doc, parts)
            elif name == "replace":
                _remove(doc, parts)
                _add(doc, parts, copy.deepcopy(op["value"]))
            else:
                raise BadRequest(f"unknown JSON patch operation {name!r}")
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        if isinstance(exc, BadRequest):
            raise
        raise BadRequest(f"the JSON patch cannot be applied: {exc!r}") from None
    if not isinstance(doc, dict):
        raise BadRequest("a JSON patch must leave an object")
    return doc


def _add(doc: Any, parts: list[str], value: Any) -> None:
    parent, last = _resolve(doc, parts[:-1]), parts[-1]
    if isinstance(parent, list):
        parent.insert(len(parent) if last == "-" else int(last), value)
    else:
        parent[last] = value


def _remove(doc: Any, parts: list[str]) -> None:
    parent, last = _resolve(doc, parts[:-1]), parts[-1]
    if isinstance(parent, list):
        parent.pop(int(last))
    else:
        del parent[last]


def apply_patch(target: Obj, content_type: str, body: Any) -> Obj:
    ct = content_type.split(";")[0].strip()
    if ct == "application/strategic-merge-patch+json":
        out = strategic_merge_patch(target, body)
    elif ct == "application/merge-patch+json":
        out = merge_patch(target, body)
    elif ct == "application/json-patch+json":
        out = json_patch(target, body)
    elif ct == "application/apply-patch+yaml":
        raise BadRequest("server-side apply is not supported by the simulator")
    else:
        raise BadRequest(f"unsupported patch content type {ct!r}")
    if not isinstance(out, dict):
        raise BadRequest("a patch must leave an object")
    return out
