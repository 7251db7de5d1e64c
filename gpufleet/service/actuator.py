"""The actuator as the service hands it to the remediation loop: traced, and reading the cluster
from the collectors' watch-backed cache instead of listing nodes and pods every tick.

`CachedActuator.cluster_view` builds the engine's view from the snapshot the live cycle just
collected (nodes, pods and events come from the Kubernetes collector's watches), so a steady-state
cycle makes no LIST request; only a write's own preconditions (pinning pod UIDs before an
eviction, reading a node before patching it) go to the API. Every write runs in a `k8s:<op>`
span and is counted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace

from gpufleet.service.telemetry import Telemetry
from observer.fleet.model import FleetSnapshot
from remediations.capabilities import (
    DeviceTaintDiscovery,
    DeviceTaintReader,
    FencedGpu,
    FencedGpuReader,
    JobOutcome,
    LiveActuator,
    NodeJobReader,
    RuleView,
    WriteContext,
)
from remediations.cluster_view import ClusterView, NodeView, PodView
from remediations.types import Intent


class SnapshotCache:
    """The newest FleetSnapshot a cycle collected (set by the cycle's collect wrapper)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snap: FleetSnapshot | None = None
        self._view: ClusterView | None = None

    def put(self, snap: FleetSnapshot) -> None:
        with self._lock:
            self._snap, self._view = snap, None

    def view(self) -> ClusterView | None:
        with self._lock:
            if self._snap is None or not self._snap.nodes:
                return None
            if self._view is None:
                self._view = ClusterView.from_snapshot(self._snap)
            return self._view

    def wrap(self, collect: Callable[[], FleetSnapshot]) -> Callable[[], FleetSnapshot]:
        def collect_and_keep() -> FleetSnapshot:
            snap = collect()
            self.put(snap)
            return snap

        return collect_and_keep


class CachedActuator:
    """LiveActuator around the real one (gpufleet.remediations.kube_actuator.KubeActuator)."""

    def __init__(
        self, inner: LiveActuator, cache: SnapshotCache | None, telemetry: Telemetry | None
    ) -> None:
        self.inner = inner
        self.cache = cache
        self.telemetry = telemetry

    def cluster_view(self, taken_at: float = 0.0) -> ClusterView:
        cached = self.cache.view() if self.cache is not None else None
        if cached is None:
            return self.inner.cluster_view(taken_at)
        if isinstance(self.inner, DeviceTaintDiscovery):  # what fence_gpu can do here
            return replace(cached, device_taints=self.inner.device_taints_served())
        return cached

    def node(self, name: str) -> NodeView | None:
        return self.inner.node(name)

    def pods_on_node(self, name: str) -> Sequence[PodView]:
        return self.inner.pods_on_node(name)

    def pods_selected(self, namespace: str, selector: str) -> Sequence[PodView]:
        return self.inner.pods_selected(namespace, selector)

    def pod(self, namespace: str, name: str) -> PodView | None:
        return self.inner.pod(namespace, name)

    def node_job(self, namespace: str, name: str) -> JobOutcome | None:
        """A repair Job's outcome, when the actuator can read Jobs (reset_gpu's verification)."""
        if not isinstance(self.inner, NodeJobReader):
            return None
        return self.inner.node_job(namespace, name)

    def device_taint_rule(self, name: str) -> RuleView | None:
        """A DeviceTaintRule, when the actuator can read them (fence_gpu's verification)."""
        if not isinstance(self.inner, DeviceTaintReader):
            return None
        return self.inner.device_taint_rule(name)

    def fenced_gpus(self) -> list[FencedGpu]:
        """The GPUs gpufleet's DeviceTaintRules fence (diagnose_and_return's GPU targets); none
        when the actuator cannot read the rules. Without this the service's diagnostic job
        never saw a fenced GPU, so none was ever diagnosed or returned."""
        if not isinstance(self.inner, FencedGpuReader):
            return []
        return self.inner.fenced_gpus()

    def pin(self, intent: Intent) -> Intent:
        return self.inner.pin(intent)

    def apply(self, intent: Intent, ctx: WriteContext) -> str:
        t = self.telemetry
        if t is None:
            return self.inner.apply(intent, ctx)
        attrs = {"op": intent.op, "target": intent.target, "action": ctx.action_id}
        with t.span(f"k8s:{intent.op}", attrs) as span:
            try:
                did = self.inner.apply(intent, ctx)
            except Exception as exc:
                t.k8s_writes.add(1, {"op": intent.op, "result": type(exc).__name__})
                span.record_exception(exc)
                raise
            t.k8s_writes.add(1, {"op": intent.op, "result": "ok"})
            return did
