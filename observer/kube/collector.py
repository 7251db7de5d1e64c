"""The Kubernetes collector: nodes, pods and GPU/node Warning events by list + watch.

The only module of `observer` that imports the `kubernetes` client (import-linter contract).
One background thread per resource runs the informer loop client-go made standard:

    list (resourceVersion R) -> watch from R (bookmarks on) -> apply ADDED/MODIFIED/DELETED
    -> the watch ends (server timeout): watch again from the newest version seen
    -> 410 Gone (history compacted): relist
    -> 429 / 5xx / timeouts / connection errors: back off exponentially (honouring Retry-After),
       then resume; never crash, count and log each error.

`problem()` says whether the API is failing now (a resource's requests failed twice in a row,
and no request has answered since; a failing loop proves recovery with a cheap list before it
watches again), so a cycle built on the cache's last view says that view may be stale.

Memory is bounded: nodes and pods are the cluster's current objects as frozen records; events
are a ring buffer (`event_buffer`) of the Warning events that concern GPUs or nodes
(observer.kube.events). `stop()` ends every thread promptly (the watch socket is shut down).

    kube = KubeCollector(KubeSettings(kubeconfig="~/.kube/config")).start()
    kube.wait_synced(10)
    snapshot = prom.collect(nodes=kube.nodes(), pods=kube.pods(), events=kube.events()).snapshot
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from observer.fleet.model import Event, Node, Pod
from observer.kube.events import event_from_api
from observer.kube.exporters import ExporterSelector, exporter_targets, exporter_urls
from observer.snapshot.kube_records import node_from_api, pod_from_api

log = logging.getLogger(__name__)
GONE = 410
TEMPORARY = frozenset({408, 429, 500, 502, 503, 504})
WARN_AFTER = 3
"""Connection failures of one watch in a row before they are logged as warnings (a server that
closes a long watch, as the simulator and load balancers do, is reconnected at debug level)."""
FAILING_AFTER = 2
"""Failed requests in a row before the API counts as failing (one is a watch the server
closed, which is routine)."""
REPEAT_WINDOW = 10.0
"""Seconds (plus the back-off) within which a failure counts as the same streak."""


@dataclass(frozen=True, slots=True)
class KubeSettings:
    kubeconfig: str | None = None
    """Kubeconfig file; None: in-cluster config, else the default kubeconfig."""
    context: str | None = None
    watch_timeout: int = 60
    """Server-side timeoutSeconds of each watch request."""
    request_timeout: float = 30.0
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    event_buffer: int = 2000


@dataclass(slots=True)
class KubeStats:
    lists: dict[str, int] = field(default_factory=dict)
    relists_after_gone: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    """`resource:status` (or `resource:ExceptionName`) -> count."""
    events_seen: int = 0
    events_kept: int = 0


def load_api_client(s: KubeSettings) -> client.ApiClient:
    cfg = client.Configuration()
    if s.kubeconfig is None:
        try:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config(context=s.context, client_configuration=cfg)  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(s.kubeconfig, context=s.context, client_configuration=cfg)  # type: ignore[no-untyped-call]
    cfg.retries = 0  # the informer loop retries, with backoff, and counts
    return client.ApiClient(cfg)


class _Resource:
    def __init__(self, name: str, lister: Callable[..., Any]) -> None:
        self.name = name
        self.lister = lister
        self.objects: dict[str, dict[str, Any]] = {}
        self.records: dict[str, tuple[dict[str, Any], Any]] = {}
        """key -> (the object a record was made of, the record): a read converts only the
        objects that changed since the last read (issue 25: converting 12,500 nodes and 26,250
        pods on every cycle was most of the service cycle at that size)."""
        self.rv: str | None = None
        self.synced = threading.Event()
        self.failures = 0
        """Failed requests in a row (reset by any answer)."""
        self.cause = ""


def _key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class KubeCollector:
    def __init__(
        self,
        settings: KubeSettings,
        *,
        api_client: client.ApiClient | None = None,
        sleep: Callable[[float], bool] | None = None,
    ) -> None:
        self.settings = settings
        self.api = api_client or load_api_client(settings)
        self.v1 = client.CoreV1Api(self.api)
        self.stats = KubeStats()
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self._lock = threading.Lock()
        self._events: deque[Event] = deque(maxlen=settings.event_buffer)
        self._event_keys: deque[str] = deque(maxlen=settings.event_buffer)
        self._resources = {
            "nodes": _Resource("nodes", self.v1.list_node),
            "pods": _Resource("pods", self.v1.list_pod_for_all_namespaces),
            "events": _Resource("events", self.v1.list_event_for_all_namespaces),
        }
        self._threads: list[threading.Thread] = []
        self._watches: dict[str, watch.Watch] = {}

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> KubeCollector:
        for res in self._resources.values():
            t = threading.Thread(
                target=self._run, args=(res,), name=f"kube-{res.name}", daemon=True
            )
            t.start()
            self._threads.append(t)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            watches = list(self._watches.values())
        for w in watches:
            w.stop()  # type: ignore[no-untyped-call]
        for t in self._threads:
            t.join(timeout)
        self.api.close()  # type: ignore[no-untyped-call]

    def __enter__(self) -> KubeCollector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_synced(self, timeout: float) -> bool:
        """True once nodes, pods and events have each been listed once."""
        deadline = time.monotonic() + timeout
        for res in self._resources.values():
            if not res.synced.wait(max(0.0, deadline - time.monotonic())):
                return False
        return True

    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def problem(self) -> str:
        """Why the Kubernetes API is failing now ("" while it answers)."""
        with self._lock:
            failing = [r for r in self._resources.values() if r.failures >= FAILING_AFTER]
        if not failing:
            return ""
        names = ", ".join(r.name for r in failing)
        return f"Kubernetes API failing ({names}): {failing[0].cause}"[:300]

    # --- reads -------------------------------------------------------------------------------

    def nodes(self) -> list[Node]:
        nodes: list[Node] = self._records(self._resources["nodes"], node_from_api)
        return nodes

    def pods(self) -> list[Pod]:
        """Pods bound to a node or pending; finished pods (Succeeded/Failed) are left out."""
        pods: list[Pod] = self._records(self._resources["pods"], pod_from_api)
        return [p for p in pods if p.phase not in ("Succeeded", "Failed")]

    def _records(self, res: _Resource, convert: Callable[[dict[str, Any]], Any]) -> list[Any]:
        """The resource's objects as records, made anew only for objects that changed (a watch
        event replaces an object's dict, so identity says whether it changed)."""
        with self._lock:
            items = list(res.objects.items())
            known = dict(res.records)
        out: list[Any] = []
        fresh: dict[str, tuple[dict[str, Any], Any]] = {}
        for key, obj in items:
            hit = known.get(key)
            if hit is None or hit[0] is not obj:
                hit = (obj, convert(obj))
            fresh[key] = hit
            out.append(hit[1])
        with self._lock:
            res.records = fresh
        return out

    def exporter_urls(self, selectors: Iterable[ExporterSelector]) -> list[str]:
        """The dcgm-exporter pods' scrape URLs from the pods already watched
        (observer.kube.exporters); empty before the first list."""
        with self._lock:
            objs = list(self._resources["pods"].objects.values())
        return exporter_urls(objs, selectors)

    def exporter_targets(self, selectors: Iterable[ExporterSelector]) -> dict[str, str]:
        """Scrape URL -> the exporter pod's node, from the pods already watched."""
        with self._lock:
            objs = list(self._resources["pods"].objects.values())
        return exporter_targets(objs, selectors)

    def events(self, since: float | None = None) -> list[Event]:
        with self._lock:
            kept = list(self._events)
        return [e for e in kept if since is None or e.time >= since]

    def _node_of_pod(self, namespace: str, name: str) -> str | None:
        obj = self._resources["pods"].objects.get(f"{namespace}/{name}")
        return None if obj is None else (obj.get("spec") or {}).get("nodeName")

    # --- the informer loop -------------------------------------------------------------------

    def _run(self, res: _Resource) -> None:
        backoff = self.settings.backoff_initial
        streak, last_failure = 0, -REPEAT_WINDOW
        while not self._stop.is_set():
            try:
                if res.rv is None:
                    self._list(res)
                elif res.failures >= FAILING_AFTER:
                    self._probe(res)
                self._watch(res)
                backoff = self.settings.backoff_initial
            except ApiException as exc:
                self._count(res, str(exc.status))
                if exc.status != GONE:
                    self._failed(res, f"HTTP {exc.status} {exc.reason or ''}".strip())
                if exc.status == GONE:
                    self.stats.relists_after_gone[res.name] = (
                        self.stats.relists_after_gone.get(res.name, 0) + 1
                    )
                    log.info(
                        "kube %s: resourceVersion %s expired (410), relisting", res.name, res.rv
                    )
                    res.rv = None
                    continue
                retry_after = _retry_after(exc)
                kind = "temporary" if exc.status in TEMPORARY else "unexpected"
                wait = max(backoff, retry_after or 0.0)
                log.warning("kube %s: HTTP %s (%s), retrying in %.1f s", res.name, exc.status,
                            kind, wait)  # fmt: skip
                self._sleep(_jitter(wait))
                backoff = min(backoff * 2, self.settings.backoff_max)
            except (Urllib3Error, OSError, ValueError) as exc:
                if self._stop.is_set():
                    break
                self._count(res, type(exc).__name__)
                now = time.monotonic()
                streak = streak + 1 if now - last_failure < REPEAT_WINDOW + backoff else 1
                last_failure = now
                self._failed(res, f"{type(exc).__name__}: {exc}", streak)
                # A watch the server closed is reconnected in silence; one that keeps failing
                # is worth a warning (each failure is counted in stats either way).
                level = logging.WARNING if streak >= WARN_AFTER else logging.DEBUG
                log.log(level, "kube %s: %s, retrying in %.1f s (%d failure(s) in a row)",
                        res.name, exc, backoff, streak)  # fmt: skip
                self._sleep(_jitter(backoff))
                backoff = min(backoff * 2, self.settings.backoff_max)

    def _failed(self, res: _Resource, cause: str, streak: int | None = None) -> None:
        """Count a failure; `streak` (connection errors) restarts the count after a quiet
        spell, so a long watch the server closes now and then never adds up to an outage."""
        with self._lock:
            res.failures = res.failures + 1 if streak is None else max(streak, 1)
            res.cause = cause

    def _answered(self, res: _Resource) -> None:
        with self._lock:
            res.failures = 0
            res.cause = ""

    def _probe(self, res: _Resource) -> None:
        """One small list after a failing streak: the API answering ends the streak at once
        rather than at the next watch event, which a quiet cluster may not send for minutes."""
        res.lister(limit=1, _preload_content=False, _request_timeout=self.settings.request_timeout)
        self._answered(res)

    def _count(self, res: _Resource, what: str) -> None:
        key = f"{res.name}:{what}"
        self.stats.errors[key] = self.stats.errors.get(key, 0) + 1

    def _list(self, res: _Resource) -> None:
        resp = res.lister(_preload_content=False, _request_timeout=self.settings.request_timeout)
        body = json.loads(resp.data)
        items = body.get("items") or []
        with self._lock:
            res.objects = {}
            if res.name == "events":
                self._events.clear()
                self._event_keys.clear()
            for obj in items:
                self._apply(res, "ADDED", obj)
            res.rv = str((body.get("metadata") or {}).get("resourceVersion") or "0")
        self.stats.lists[res.name] = self.stats.lists.get(res.name, 0) + 1
        self._answered(res)
        res.synced.set()

    def _watch(self, res: _Resource) -> None:
        w = watch.Watch()  # type: ignore[no-untyped-call]
        with self._lock:
            self._watches[res.name] = w
        try:
            stream = w.stream(  # type: ignore[no-untyped-call]
                res.lister,
                resource_version=res.rv,
                allow_watch_bookmarks=True,
                timeout_seconds=self.settings.watch_timeout,
                _request_timeout=self.settings.watch_timeout + self.settings.request_timeout,
            )
            for event in stream:
                if self._stop.is_set():
                    break
                if res.failures:
                    self._answered(res)
                obj = event.get("raw_object") or {}
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                with self._lock:
                    if event["type"] != "BOOKMARK":
                        self._apply(res, event["type"], obj)
                    if rv:
                        res.rv = str(rv)
        finally:
            with self._lock:
                self._watches.pop(res.name, None)
        self._answered(res)  # the server ended the watch: it answered

    def _apply(self, res: _Resource, kind: str, obj: dict[str, Any]) -> None:
        if res.name == "events":
            self._apply_event(obj)
            return
        key = _key(obj)
        if kind == "DELETED":
            res.objects.pop(key, None)
        else:
            res.objects[key] = obj

    def _apply_event(self, obj: dict[str, Any]) -> None:
        self.stats.events_seen += 1
        meta = obj.get("metadata") or {}
        key = f"{meta.get('uid', _key(obj))}:{obj.get('count', 1)}"
        if key in self._event_keys:
            return
        event = event_from_api(obj, self._node_of_pod)
        if event is None:
            return
        self._event_keys.append(key)
        self._events.append(event)
        self.stats.events_kept += 1


def _retry_after(exc: ApiException) -> float | None:
    headers: Iterable[tuple[str, str]] = (exc.headers or {}).items()
    for k, v in headers:
        if k.lower() == "retry-after":
            try:
                return float(v)
            except ValueError:
                return None
    return None


def _jitter(seconds: float) -> float:
    return seconds * random.uniform(1.0, 1.2)
