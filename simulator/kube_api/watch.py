"""Watch streams of the simulated API server, with the real server's resourceVersion rules.

`watch=true` without a resourceVersion (or "0") first replays the current objects as ADDED, then
streams changes; with a resourceVersion it streams every later change from the bounded history,
or a single ERROR event carrying a 410 `Expired` Status when that version is forgotten (the
signal that makes informers and the kubernetes client relist). Streams end at `timeoutSeconds`,
when the server stops, and emit BOOKMARK events when the client allows them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from simulator.kube_api.conversion import to_version
from simulator.kube_api.discovery import Resource
from simulator.kube_api.faults import status_body
from simulator.kube_api.object_store import Expired, ObjectStore, WatchEvent
from simulator.kube_api.query import field_matcher, label_matcher

Obj = dict[str, Any]
DEFAULT_TIMEOUT = 1800.0


def decorate(res: Resource, obj: Obj) -> Obj:
    """The object as the API returns it: at the requested version, with its kind and apiVersion."""
    obj = to_version(res.plural, res.group, res.version, obj)
    return {**obj, "kind": res.kind, "apiVersion": res.api_version}


def watch_events(
    store: ObjectStore,
    res: Resource,
    namespace: str | None,
    params: dict[str, str],
    *,
    stopping: Callable[[], bool] = lambda: False,
    bookmark_interval: float = 10.0,
) -> Iterator[Obj]:
    """Watch events (JSON dicts) for `res` in `namespace` (None: all) filtered by the params."""
    labels = label_matcher(params.get("labelSelector"))
    fields = field_matcher(params.get("fieldSelector"))

    def accept_obj(o: Obj) -> bool:
        in_ns = namespace is None or o["metadata"].get("namespace", "") == namespace
        return in_ns and labels(o) and fields(o)

    def accept(e: WatchEvent) -> bool:
        return accept_obj(e.obj)

    deadline = time.monotonic() + float(params.get("timeoutSeconds") or DEFAULT_TIMEOUT)
    bookmarks = params.get("allowWatchBookmarks") == "true"
    rv_param = params.get("resourceVersion", "")
    if rv_param in ("", "0"):
        rv, items = store.objects(res.plural, namespace)
        for o in items:
            if accept_obj(o):
                yield {"type": "ADDED", "object": decorate(res, o)}
    else:
        try:
            rv = int(rv_param)
        except ValueError:
            message = f"invalid resourceVersion {rv_param!r}"
            yield {"type": "ERROR", "object": status_body(400, message, "BadRequest")}
            return
    last_bookmark = time.monotonic()
    while not store.closed and not stopping():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        try:
            events, seen = store.wait(res.plural, rv, min(left, 0.5), accept)
        except Expired as exc:
            yield {"type": "ERROR", "object": status_body(410, str(exc), "Expired")}
            return
        for e in events:
            yield {"type": e.type, "object": decorate(res, e.obj)}
        rv = max(seen, rv)
        if bookmarks and time.monotonic() - last_bookmark >= bookmark_interval:
            last_bookmark = time.monotonic()
            meta = {"resourceVersion": str(rv)}
            bookmark = {"kind": res.kind, "apiVersion": res.api_version, "metadata": meta}
            yield {"type": "BOOKMARK", "object": bookmark}
