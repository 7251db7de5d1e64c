"""Frozen records the store hands out, so callers never hold a live ORM object or a session."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from remediations.types import (
    ActionId,
    ActionState,
    IncidentId,
    IncidentStatus,
    Intent,
    Mode,
    Verdict,
)


@dataclass(frozen=True, slots=True)
class IncidentRecord:
    id: IncidentId
    cluster: str
    kind: str
    entity_key: str
    node: str | None
    gpu_uuid: str | None
    job: str | None
    status: IncidentStatus
    severity: str
    summary: str
    opened_at: float
    updated_at: float
    resolved_at: float | None
    first_seen: float
    last_seen: float
    seen_cycles: int
    healthy_cycles: int
    evidence: Mapping[str, Any] = field(default_factory=dict)
    last_decision: str = ""


@dataclass(frozen=True, slots=True)
class NewAction:
    """What the engine asks the store to journal; the store assigns the id from the key."""

    idempotency_key: str
    incident_id: IncidentId
    playbook: str
    target: str
    target_nodes: tuple[str, ...]
    disruptive: bool
    mode: Mode
    rule: str
    state: ActionState
    decision: Verdict
    reasons: tuple[str, ...]
    params: Mapping[str, Any]
    plan: tuple[Intent, ...]
    shadow: bool
    attempt: int
    result: str = ""
    deadline: float | None = None


@dataclass(frozen=True, slots=True)
class ActionRecord:
    id: ActionId
    cluster: str
    idempotency_key: str
    incident_id: IncidentId
    playbook: str
    target: str
    target_nodes: tuple[str, ...]
    disruptive: bool
    mode: Mode
    rule: str
    state: ActionState
    version: int
    decision: Verdict
    reasons: tuple[str, ...]
    params: Mapping[str, Any]
    plan: tuple[Intent, ...]
    progress: int
    step_started: int | None
    shadow: bool
    attempt: int
    created_at: float
    updated_at: float
    approved_by: str | None
    lease_owner: str | None
    lease_until: float | None
    result: str
    started_at: float | None = None
    phase: str = "run"
    deadline: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "cluster": self.cluster,
            "incident_id": self.incident_id,
            "playbook": self.playbook,
            "target": self.target,
            "target_nodes": list(self.target_nodes),
            "mode": self.mode.value,
            "rule": self.rule,
            "state": self.state.value,
            "decision": self.decision.value,
            "reasons": list(self.reasons),
            "params": dict(self.params),
            "plan": [i.to_json() for i in self.plan],
            "progress": self.progress,
            "shadow": self.shadow,
            "attempt": self.attempt,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "approved_by": self.approved_by,
            "result": self.result,
        }


@dataclass(frozen=True, slots=True)
class ActionBrief:
    """The columns the gates count (rate, cooldown, attempts, blast radius): cheap to load."""

    id: ActionId
    incident_id: IncidentId
    playbook: str
    target: str
    target_nodes: tuple[str, ...]
    disruptive: bool
    state: ActionState
    shadow: bool
    created_at: float
    attempt: int
    started_at: float | None = None
    decision: Verdict = Verdict.EXECUTE
    deadline: float | None = None
    from_intake: bool = False
    """Its incident came from alerts delivered to gpufleet (their own blast-radius budget)."""
    updated_at: float | None = None

    @property
    def at(self) -> float:
        """When it counts for rate and cooldown: its start, else its decision."""
        return self.started_at if self.started_at is not None else self.created_at

    @property
    def settled_at(self) -> float:
        """When the cooldown before the next attempt starts: a failed or rolled-back attempt's
        end (a reboot that timed out after 30 min waits a cooldown more), else `at`."""
        failed = self.state in (ActionState.FAILED, ActionState.ROLLED_BACK)
        return max(self.at, self.updated_at or self.at) if failed else self.at


@dataclass(frozen=True, slots=True)
class AuditRecord:
    id: int
    cluster: str
    at: float
    actor: str
    kind: str
    action_id: str | None
    incident_id: str | None
    target: str
    message: str
    detail: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "cluster": self.cluster,
            "at": self.at,
            "actor": self.actor,
            "kind": self.kind,
            "action_id": self.action_id,
            "incident_id": self.incident_id,
            "target": self.target,
            "message": self.message,
            "detail": dict(self.detail),
        }


@dataclass(frozen=True, slots=True)
class EngineState:
    cluster: str
    paused: bool = False
    paused_by: str = ""
    paused_reason: str = ""
    breaker_tripped: bool = False
    breaker_tripped_at: float | None = None
    breaker_reason: str = ""
    breaker_reset_at: float | None = None
    breaker_reset_by: str = ""
    version: int = 0
    """Bumped by every pause, breaker move and action start (0: no row yet)."""
