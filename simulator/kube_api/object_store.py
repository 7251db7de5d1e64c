"""The simulated API server's object store: one resourceVersion counter, a bounded watch history.

Kubernetes clients depend on a few storage guarantees more than on any single object: every write
gets a new, larger resourceVersion; a watch from version X sees every later change in order; and a
watch from a version the server has forgotten answers 410 Gone, which makes the client relist.
This module gives exactly those guarantees for plain JSON dicts, thread-safely. Stored dicts are
never mutated after `put`; writers copy, change and put again.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
Key = tuple[str, str, str]
"""(resource, namespace, name); namespace is "" for cluster-scoped resources."""


class Expired(Exception):
    """The requested resourceVersion is older than the retained history (HTTP 410 Gone)."""

    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested = requested
        self.oldest = oldest


class Conflict(Exception):
    """A write carried a resourceVersion that is no longer current, or the object exists."""


@dataclass(frozen=True, slots=True)
class WatchEvent:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    resource: str
    obj: Obj


def key_of(resource: str, obj: Obj) -> Key:
    meta = obj["metadata"]
    return (resource, str(meta.get("namespace", "")), str(meta["name"]))


class ObjectStore:
    """Thread-safe objects by (resource, namespace, name) with a global resourceVersion."""

    def __init__(self, history: int = 2000) -> None:
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        """resource -> (namespace, name) -> object."""
        self._last_change: dict[str, int] = {}
        self._rv = 0
        self._history: deque[WatchEvent] = deque(maxlen=max(1, history))
        self._compacted = 0
        """Newest resourceVersion no longer in the history (a watch from below it gets 410)."""
        self.closed = False

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._rv

    @property
    def compacted(self) -> int:
        with self._lock:
            return self._compacted

    def get(self, resource: str, namespace: str, name: str) -> Obj | None:
        with self._lock:
            return self._objects.get(resource, {}).get((namespace, name))

    def changed_at(self, resource: str) -> int:
        """The resourceVersion of the newest write to `resource` (0 if never written)."""
        with self._lock:
            return self._last_change.get(resource, 0)

    def objects(self, resource: str, namespace: str | None = None) -> tuple[int, list[Obj]]:
        """(current resourceVersion, objects sorted by namespace/name)."""
        with self._lock:
            objs = self._objects.get(resource, {})
            keys = sorted(k for k in objs if namespace is None or k[0] == namespace)
            return self._rv, [objs[k] for k in keys]

    def _record(self, event_type: str, resource: str, obj: Obj) -> None:
        if len(self._history) == self._history.maxlen:
            self._compacted = self._history[0].rv
        self._history.append(WatchEvent(self._rv, event_type, resource, obj))
        self._last_change[resource] = self._rv
        self._changed.notify_all()

    def put(
        self, resource: str, obj: Obj, *, expect_rv: str | None = None, create: bool = False
    ) -> Obj:
        """Store `obj` with a new resourceVersion; ADDED or MODIFIED. Returns the stored object.

        The top level and metadata are copied, so a caller that built `obj` from a stored object
        with `{**old, ...}` cannot change the old version (which watch history still holds).
        """
        with self._lock:
            key = key_of(resource, obj)
            objs = self._objects.setdefault(resource, {})
            old = objs.get(key[1:])
            if create and old is not None:
                raise Conflict(f'{resource} "{key[2]}" already exists')
            if expect_rv and old is not None and old["metadata"]["resourceVersion"] != expect_rv:
                raise Conflict(
                    f'Operation cannot be fulfilled on {resource} "{key[2]}": the object has '
                    "been modified; please apply your changes to the latest version and try again"
                )
            self._rv += 1
            obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self._rv)}}
            objs[key[1:]] = obj
            self._record("ADDED" if old is None else "MODIFIED", resource, obj)
            return obj

    def delete(self, resource: str, namespace: str, name: str) -> Obj | None:
        """Remove an object; its DELETED event carries the new resourceVersion."""
        with self._lock:
            old = self._objects.get(resource, {}).pop((namespace, name), None)
            if old is None:
                return None
            self._rv += 1
            gone = {**old, "metadata": {**old["metadata"], "resourceVersion": str(self._rv)}}
            self._record("DELETED", resource, gone)
            return gone

    def compact(self) -> None:
        """Forget the whole history: any watch from an older resourceVersion now gets 410."""
        with self._lock:
            self._history.clear()
            self._compacted = self._rv

    def events_since(self, resource: str, rv: int) -> list[WatchEvent]:
        with self._lock:
            if rv < self._compacted:
                raise Expired(rv, self._compacted + 1)
            return [e for e in self._history if e.rv > rv and e.resource == resource]

    def wait(
        self,
        resource: str,
        rv: int,
        timeout: float,
        accept: Callable[[WatchEvent], bool] | None = None,
    ) -> tuple[list[WatchEvent], int]:
        """Block up to `timeout` s for accepted events after `rv`: (events, version seen up to)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                events = self.events_since(resource, rv)
                seen = self._rv
                if accept is not None:
                    events = [e for e in events if accept(e)]
                left = deadline - time.monotonic()
                if events or left <= 0 or self.closed:
                    return events, seen
                rv = seen  # nothing of interest up to here; skip past it
                self._changed.wait(min(left, 0.5))

    def close(self) -> None:
        with self._lock:
            self.closed = True
            self._changed.notify_all()

    def count(self, resource: str) -> int:
        with self._lock:
            return len(self._objects.get(resource, {}))
