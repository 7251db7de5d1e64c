"""The playbook contract: plan -> (actuator executes) -> verify -> roll back.

Planning is pure: it reads the incident's subject and the cluster view and returns intents, never
writes. The runner journals the plan, hands each intent to the actuator and asks the playbook to
verify against live reads; on failure it asks the playbook for rollback intents (only undoing what
gpufleet itself did).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from observer.fleet.units import Duration
from remediations.capabilities import ClusterReader
from remediations.cluster_names import GUARD_OP
from remediations.cluster_view import ClusterView
from remediations.types import IncidentId, Intent


class BaseParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    verify_timeout: Duration = Field(default=300.0, gt=0)
    """How long verification may stay pending before the action fails."""
    execute_timeout: Duration = Field(default=3600.0, gt=0)
    """How long execution may keep hitting temporary errors before the action fails (never
    "in progress forever", NVSentinel #1805/#1808)."""


@dataclass(frozen=True, slots=True)
class Subject:
    """What an incident is about, as a playbook needs it."""

    incident_id: IncidentId
    kind: str
    severity: str
    summary: str
    node: str | None = None
    gpu_uuid: str | None = None
    job: str | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)
    """The incident's latest evidence (e.g. gpu_xid's `xid` and `nvidia_action`)."""


@dataclass(frozen=True, slots=True)
class Plan:
    playbook: str
    target: str
    """`node/<name>`, `pod/<ns>/<name>` or `job/<ns>/<name>`: the cooldown/attempt key."""
    intents: tuple[Intent, ...]
    disruptive: bool
    """Makes `target_nodes` unavailable: counts toward the blast radius."""
    target_nodes: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()
    """Namespaces of the pods the plan touches (protected-namespace gate)."""
    priority_classes: tuple[str, ...] = ()
    undo: bool = False
    """Undoes an earlier action: allowed only on what gpufleet did (ownership gate)."""
    owned: bool = True


@dataclass(frozen=True, slots=True)
class NoPlan:
    """The playbook has nothing it can do for this subject (and says why)."""

    reason: str


class VerifyStatus(StrEnum):
    OK = "ok"
    PENDING = "pending"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Verification:
    status: VerifyStatus
    detail: str = ""


class Playbook(ABC):
    name: ClassVar[str]
    disruptive: ClassVar[bool] = False
    Params: ClassVar[type[BaseParams]] = BaseParams

    def params(self, raw: Mapping[str, Any]) -> BaseParams:
        return self.Params.model_validate(dict(raw))

    @abstractmethod
    def plan(self, subject: Subject, view: ClusterView, params: BaseParams) -> Plan | NoPlan: ...

    @abstractmethod
    def verify(
        self, intents: tuple[Intent, ...], reader: ClusterReader, params: BaseParams
    ) -> Verification: ...

    def rollback(self, intents: tuple[Intent, ...]) -> tuple[Intent, ...]:
        """Intents that undo a failed attempt (default: nothing to undo)."""
        return ()


def node_target(name: str) -> str:
    return f"node/{name}"


def node_of(subject: Subject, view: ClusterView) -> str | NoPlan:
    if subject.node is None:
        return NoPlan(f"{subject.kind} incident names no node")
    if subject.node not in view.nodes:
        return NoPlan(f"node {subject.node} is not in the cluster view")
    return subject.node


def gpu_of(subject: Subject, view: ClusterView) -> tuple[str, str] | NoPlan:
    """(node, GPU UUID) of a GPU-level incident, or why the playbook cannot act on one GPU."""
    node = node_of(subject, view)
    if isinstance(node, NoPlan):
        return node
    if not subject.gpu_uuid:
        return NoPlan(f"{subject.kind} incident names no GPU: act on the node instead")
    return node, subject.gpu_uuid


def guard_unverified(i: Intent, reader: ClusterReader) -> Verification | None:
    """A pinned guard that decided to cordon, checked on the live node: None when it holds."""
    if i.op != GUARD_OP or not i.args.get("cordon"):
        return None
    node = reader.node(i.target)
    if node is None:
        return Verification(VerifyStatus.FAILED, f"node {i.target} is gone")
    if not node.unschedulable:
        return Verification(VerifyStatus.PENDING, f"{i.target} not yet cordoned")
    return None
