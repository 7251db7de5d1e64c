"""The actuator contract, without Kubernetes: what the runner may ask of the one writer.

`kube.actuator.KubeActuator` implements it with the `kubernetes` client; tests may use
an
in-memory cluster that speaks the same contract. Every intent is idempotent: `pin` resolves what
it will touch (pod UIDs) so the runner can journal that *before* the write, and `apply` makes the
write with those preconditions, so re-applying after a crash never acts twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from remediations.cluster_view import ClusterReader
from remediations.types import ACTOR, Intent


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
