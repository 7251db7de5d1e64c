"""The verbs of the simulated Kubernetes API: get, list, watch, create, update, patch, evict.

Transport-free: each verb takes a parsed request and returns a `Reply` (status + JSON body) or, for
watches, an iterator of watch events. `k8s_api` puts them on the wire. The semantics follow the
real API server where clients can tell the difference: list metadata carries the resourceVersion,
`limit`/`continue` page through a list, a watch from a forgotten version ends with a 410 ERROR
event, errors are `v1 Status` objects with the real reasons and messages.
"""

from __future__ import annotations

import base64
import copy
import json
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from simulator.cluster import Invalid, NotFound, SimCluster, TooManyRequests
from simulator.controller import NAME_CHARS
from simulator.kube_api import discovery as disc
from simulator.kube_api import tables as tables
from simulator.kube_api import validation
from simulator.kube_api.faults import status_body
from simulator.kube_api.object_store import Conflict
from simulator.kube_api.query import (
    BadRequest,
    apply_patch,
    check_field_selector,
    field_matcher,
    label_matcher,
)
from simulator.kube_api.watch import decorate, watch_events

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: Obj
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    resource: disc.Resource
    namespace: str | None
    name: str | None
    subresource: str | None
    params: dict[str, str] = field(default_factory=dict)
    body: Any = None
    content_type: str = "application/json"
    accept: str = "application/json"


STATUS_RESOURCES = frozenset({"pods", "nodes", "jobs", "poddisruptionbudgets", "namespaces"})
"""Resources with a `/status` subresource: writes to the object leave status alone."""


def error(code: int, message: str, reason: str, req: Request | None = None, **extra: Any) -> Reply:
    details: Obj = {}
    if req is not None and req.name:
        details = {"name": req.name, "kind": req.resource.plural}
        if req.resource.group:
            details["group"] = req.resource.group
    details.update(extra)
    return Reply(code, status_body(code, message, reason, details or None))


def not_found(req: Request) -> Reply:
    what = (
        req.resource.plural
        if not req.resource.group
        else f"{req.resource.plural}.{req.resource.group}"
    )
    return error(404, f'{what} "{req.name}" not found', "NotFound", req)


class Verbs:
    """The API verbs over one simulated cluster (stateless apart from it; thread-safe)."""

    def __init__(self, cluster: SimCluster, *, bookmark_interval: float = 10.0) -> None:
        self.cluster = cluster
        self.bookmark_interval = bookmark_interval

    # --- reads --------------------------------------------------------------------------------

    def _matching(self, req: Request) -> tuple[int, list[Obj]]:
        check_field_selector(req.resource.plural, req.params.get("fieldSelector"))
        labels = label_matcher(req.params.get("labelSelector"))
        fields = field_matcher(req.params.get("fieldSelector"))
        rv, items = self.cluster.store.objects(req.resource.plural, req.namespace)
        return rv, [o for o in items if labels(o) and fields(o)]

    def get(self, req: Request) -> Reply:
        obj = self.cluster.store.get(req.resource.plural, req.namespace or "", req.name or "")
        if obj is None:
            return not_found(req)
        obj = decorate(req.resource, obj)
        if tables.wants_table(req.accept):
            return Reply(
                200,
                tables.table(
                    req.resource.plural,
                    [obj],
                    {"resourceVersion": obj["metadata"]["resourceVersion"]},
                    req.params.get("includeObject", "Metadata"),
                ),
            )
        return Reply(200, obj)

    def list(self, req: Request) -> Reply:
        rv, items = self._matching(req)
        token = req.params.get("continue")
        if token:
            try:
                state = json.loads(base64.urlsafe_b64decode(token.encode()))
                start, token_rv = (str(state["ns"]), str(state["name"])), int(state["rv"])
            except (ValueError, KeyError, TypeError):
                return error(400, "continue key is not valid", "BadRequest")
            if token_rv < self.cluster.store.compacted:
                return error(
                    410,
                    "The provided continue parameter is too old to display a "
                    "consistent list result. You can start a new list without the "
                    "continue parameter.",
                    "Expired",
                )
            items = [o for o in items if _sort_key(o) > start]
        meta: Obj = {"resourceVersion": str(rv)}
        limit = int(req.params.get("limit") or 0)
        if limit > 0 and len(items) > limit:
            rest = len(items) - limit
            items = items[:limit]
            last = _sort_key(items[-1])
            nxt = {"rv": rv, "ns": last[0], "name": last[1]}
            meta["continue"] = base64.urlsafe_b64encode(json.dumps(nxt).encode()).decode()
            meta["remainingItemCount"] = rest
        items = [decorate(req.resource, o) for o in items]
        if tables.wants_table(req.accept):
            return Reply(
                200,
                tables.table(
                    req.resource.plural, items, meta, req.params.get("includeObject", "Metadata")
                ),
            )
        return Reply(
            200,
            {
                "kind": req.resource.list_kind,
                "apiVersion": req.resource.api_version,
                "metadata": meta,
                "items": items,
            },
        )

    def watch(self, req: Request, stopping: Callable[[], bool] = lambda: False) -> Iterator[Obj]:
        """Watch events as JSON dicts (see `k8s_watch`); Table rows when kubectl asks for them."""
        check_field_selector(req.resource.plural, req.params.get("fieldSelector"))
        events = watch_events(
            self.cluster.store,
            req.resource,
            req.namespace,
            req.params,
            stopping=stopping,
            bookmark_interval=self.bookmark_interval,
        )
        if not tables.wants_table(req.accept):
            return events
        include = req.params.get("includeObject", "Metadata")
        return (_as_table(req.resource.plural, e, include) for e in events)

    # --- writes -------------------------------------------------------------------------------

    def _body(self, req: Request) -> Obj:
        if not isinstance(req.body, dict):
            raise BadRequest("the request body must be a JSON object")
        body = copy.deepcopy(req.body)
        meta = body.setdefault("metadata", {})
        if req.resource.namespaced:
            if meta.get("namespace") and meta["namespace"] != req.namespace:
                raise BadRequest(
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request"
                )
            meta["namespace"] = req.namespace
        body["kind"], body["apiVersion"] = req.resource.kind, req.resource.api_version
        return body

    def create(self, req: Request) -> Reply:
        body = self._body(req)
        meta = body["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            suffix = "".join(secrets.choice(NAME_CHARS) for _ in range(5))
            meta["name"] = meta["generateName"] + suffix
        if not meta.get("name"):
            return error(
                422,
                f'{req.resource.kind} "" is invalid: metadata.name: Required value: '
                "name or generateName is required",
                "Invalid",
            )
        if (
            req.namespace is not None
            and self.cluster.store.get("namespaces", "", req.namespace) is None
        ):
            return error(
                404,
                f'namespaces "{req.namespace}" not found',
                "NotFound",
                None,
                name=req.namespace,
                kind="namespaces",
            )
        if req.resource.plural == "namespaces":
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
            body.setdefault("spec", {"finalizers": ["kubernetes"]})
            body["status"] = {"phase": "Active"}
        meta.pop("resourceVersion", None)
        if req.resource.plural == "poddisruptionbudgets":
            meta["generation"] = 1
            body.pop("status", None)  # the disruption controller writes it
        invalid = self._invalid(req, body)
        if invalid is not None:
            return invalid
        if req.params.get("dryRun") == "All":
            return Reply(201, body)
        try:
            out = self.cluster.write(req.resource.plural, body, create=True)
        except Conflict:
            return error(
                409, f'{req.resource.plural} "{meta["name"]}" already exists', "AlreadyExists", req
            )
        return Reply(201, decorate(req.resource, out))

    def _invalid(self, req: Request, body: Obj) -> Reply | None:
        """400 for a body the real API server cannot decode, 422 Invalid (with causes) for one
        its validation rejects."""
        res = req.resource
        try:
            validation.decode(res.plural, body)
        except validation.Undecodable as exc:
            return error(400, str(exc), "BadRequest")
        errors = validation.validate(res.plural, body)
        if not errors:
            return None
        name = str(body["metadata"].get("name", ""))
        message = validation.invalid_message(res.kind, res.group, name, errors)
        details: Obj = {"name": name, "kind": res.kind, "causes": [e.cause() for e in errors]}
        if res.group:
            details["group"] = res.group
        return Reply(422, status_body(422, message, "Invalid", details))

    def update(self, req: Request) -> Reply:
        body = self._body(req)
        if body["metadata"].get("name") != req.name:
            return error(
                400, "the name of the object does not match the name on the URL", "BadRequest", req
            )
        expect = body["metadata"].get("resourceVersion") or None
        return self._write(req, body, expect)

    def patch(self, req: Request) -> Reply:
        current = self.cluster.store.get(req.resource.plural, req.namespace or "", req.name or "")
        if current is None:
            return not_found(req)
        new = apply_patch(decorate(req.resource, current), req.content_type, req.body)
        new["metadata"]["name"], new["kind"] = req.name, req.resource.kind
        expect = None
        if new["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            expect = new["metadata"].get("resourceVersion")  # a patch may carry a precondition
        return self._write(req, new, expect)

    def _write(self, req: Request, obj: Obj, expect: str | None) -> Reply:
        res = req.resource
        current = self.cluster.store.get(res.plural, req.namespace or "", req.name or "")
        if current is not None and res.plural == "poddisruptionbudgets":
            gen = int(current["metadata"].get("generation", 1))
            changed = obj.get("spec") != current.get("spec")
            obj["metadata"]["generation"] = gen + 1 if changed else gen
        if current is not None and res.plural in STATUS_RESOURCES:
            # the main resource ignores status, /status ignores spec (the status strategies)
            kept = "spec" if req.subresource == "status" else "status"
            if kept in current:
                obj[kept] = copy.deepcopy(current[kept])
            else:
                obj.pop(kept, None)
        invalid = self._invalid(req, obj)
        if invalid is not None:
            return invalid
        if req.params.get("dryRun") == "All":
            return Reply(200, obj)
        try:
            out = self.cluster.write(req.resource.plural, obj, expect_rv=expect)
        except NotFound:
            return not_found(req)
        except Conflict as exc:
            return error(409, str(exc), "Conflict", req)
        return Reply(200, decorate(req.resource, out))

    def delete(self, req: Request) -> Reply:
        opts = req.body if isinstance(req.body, dict) else {}
        uid = (opts.get("preconditions") or {}).get("uid")
        dry = req.params.get("dryRun") == "All" or "All" in (opts.get("dryRun") or [])
        grace_raw = opts.get("gracePeriodSeconds", req.params.get("gracePeriodSeconds"))
        grace = None if grace_raw is None else int(grace_raw)
        try:
            gone = self.cluster.delete(
                req.resource.plural,
                req.namespace or "",
                req.name or "",
                uid=uid,
                dry_run=dry,
                grace=grace,
            )
        except NotFound:
            return not_found(req)
        except Conflict as exc:
            return error(409, str(exc), "Conflict", req)
        return Reply(200, decorate(req.resource, gone))

    def evict(self, req: Request) -> Reply:
        body = req.body if isinstance(req.body, dict) else {}
        opts = body.get("deleteOptions") or {}
        dry = req.params.get("dryRun") == "All" or "All" in (opts.get("dryRun") or [])
        uid = (opts.get("preconditions") or {}).get("uid")
        try:
            self.cluster.evict(req.namespace or "", req.name or "", dry_run=dry, uid=uid)
        except NotFound:
            return not_found(req)
        except Conflict as exc:
            return error(409, str(exc), "Conflict", req)
        except TooManyRequests as exc:
            return Reply(
                429,
                status_body(
                    429,
                    str(exc),
                    "TooManyRequests",
                    {"causes": [{"reason": "DisruptionBudget", "message": exc.cause}]},
                ),
            )
        except Invalid as exc:
            return error(500, str(exc), "InternalError", req)
        return Reply(
            201,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "code": 201,
            },
        )


def _as_table(resource: str, event: Obj, include: str) -> Obj:
    """A watch event whose object is a one-row Table (what `kubectl get -w` asks for)."""
    if event["type"] not in ("ADDED", "MODIFIED", "DELETED"):
        return event
    obj = event["object"]
    meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
    return {"type": event["type"], "object": tables.table(resource, [obj], meta, include)}


def _sort_key(o: Obj) -> tuple[str, str]:
    """The store's list order: namespace, then name."""
    return (str(o["metadata"].get("namespace", "")), str(o["metadata"]["name"]))
