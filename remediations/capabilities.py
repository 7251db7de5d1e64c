"""What the engine and the playbooks may ask of the cluster: every capability contract in one place.

No Kubernetes here. `kube.actuator.KubeActuator` implements all of them with the `kubernetes`
client; tests may use an in-memory cluster that speaks the same contracts. Playbooks check the
optional ones (`DeviceTaintReader`, `NodeJobReader`, ...) with `isinstance` and say plainly when an
actuator lacks one. Every intent is idempotent: `pin` resolves what it will touch (pod UIDs) so
the runner can journal that *before* the write, and `apply` makes the write with those
preconditions, so re-applying after a crash never acts twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from remediations.cluster_view import ClusterView, NodeView, PodView
from remediations.types import ACTOR, Intent

# ---- reading the live cluster -------------------------------------------------------------------


class ClusterReader(Protocol):
    """Live reads a playbook's verification needs (the actuator implements it)."""

    def node(self, name: str) -> NodeView | None: ...

    def pods_on_node(self, name: str) -> Sequence[PodView]: ...

    def pods_selected(self, namespace: str, selector: str) -> Sequence[PodView]: ...

    def pod(self, namespace: str, name: str) -> PodView | None: ...


class RuleView(Protocol):
    """A DeviceTaintRule as playbooks read it (kube.dra.TaintRuleView)."""

    @property
    def effect(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def ours(self) -> bool: ...
    @property
    def device(self) -> str | None: ...
    @property
    def labels(self) -> Mapping[str, str]: ...


@runtime_checkable
class DeviceTaintDiscovery(Protocol):
    def device_taints_served(self) -> bool | None:
        """Whether the cluster serves DeviceTaintRules (None: could not tell)."""
        ...


@runtime_checkable
class DeviceTaintReader(Protocol):
    def device_taint_rule(self, name: str) -> RuleView | None: ...


class JobOutcome(Protocol):
    @property
    def outcome(self) -> str | None: ...
    @property
    def detail(self) -> str: ...


@runtime_checkable
class NodeJobReader(Protocol):
    """Reads a repair Job's outcome (the actuator implements it)."""

    def node_job(self, namespace: str, name: str) -> JobOutcome | None: ...


@dataclass(frozen=True, slots=True)
class FencedGpu:
    """One GPU under one of gpufleet's DeviceTaintRules, resolved through its ResourceSlice."""

    rule: str
    node: str
    index: int
    """The GPU's `index` attribute (NVML's, what `dcgmi diag -i` takes)."""
    uuid: str
    effect: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    held_by: tuple[str, ...] = ()
    """Who its ResourceClaims reserve it for (`namespace/pod`; empty: none, or the cluster serves
    no ResourceClaims)."""


@runtime_checkable
class FencedGpuReader(Protocol):
    """Lists the GPUs gpufleet's own DeviceTaintRules fence (KubeActuator)."""

    def fenced_gpus(self) -> list[FencedGpu]: ...


# ---- writing ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WriteContext:
    """Who and why, carried as annotations on every object gpufleet writes."""

    action_id: str
    incident_id: str
    playbook: str
    reason: str
    actor: str = ACTOR
    keepalive: Callable[[], None] | None = field(default=None, compare=False)
    """Called by a long-running intent (a drain waiting on PodDisruptionBudgets) at every
    back-off, so the runner renews its claim on the action while it waits; raises (a
    TemporaryError) when the claim is lost, which ends the intent for now."""

    def alive(self) -> None:
        if self.keepalive is not None:
            self.keepalive()


class Actuator(ClusterReader, Protocol):
    def pin(self, intent: Intent) -> Intent:
        """The intent with everything it will touch resolved (e.g. pod UIDs); no writes."""
        ...

    def apply(self, intent: Intent, ctx: WriteContext) -> str:
        """Carry out one pinned intent; idempotent. Returns a short description of what it did.
        Raises errors.TemporaryError (try again later: API unavailable, conflict, a PDB
        still blocking within the timeout) or errors.PermanentError (cannot succeed: timeout
        exhausted, object forbidden, bad intent)."""
        ...


class LiveActuator(Actuator, Protocol):
    """An actuator that also lists the whole cluster for the engine's view."""

    def cluster_view(self, taken_at: float = 0.0) -> ClusterView: ...


# ---- node Jobs (diagnostics, repairs) -----------------------------------------------------------


@runtime_checkable
class JobReasons(Protocol):
    """Says why a finished Job failed (kube.jobs.KubeNodeJobs)."""

    def reason(self, namespace: str, name: str) -> str:
        """The container's own words (its termination message); "" when it said nothing."""
        ...


class NodeJobs(Protocol):
    """Creates and reads Jobs pinned to one node (kube.jobs.KubeNodeJobs)."""

    def ensure(
        self,
        namespace: str,
        node: str,
        name: str,
        image: str,
        command: list[str],
        labels: dict[str, str],
        gpus: int = 0,
    ) -> str:
        """Create the Job unless it exists: `created` or `exists`."""
        ...

    def outcome(self, namespace: str, name: str) -> str | None:
        """`passed`, `failed`, or None while it runs (or when it does not exist)."""
        ...

    def exists(self, namespace: str, name: str) -> bool: ...
