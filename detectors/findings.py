"""What detectors say: typed findings that the remediation engine and people both read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class FindingKind(StrEnum):
    GPU_XID = "gpu_xid"
    GPU_MEMORY = "gpu_memory"
    GPU_THROTTLE = "gpu_throttle"
    GPU_INTERCONNECT = "gpu_interconnect"
    GPU_LOST = "gpu_lost"
    STRAGGLER = "straggler"
    NCCL_HANG = "nccl_hang"
    GPU_IDLE = "gpu_idle"
    ANOMALY = "anomaly"
    MONITORING_GAP = "monitoring_gap"


class Severity(StrEnum):
    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"critical": 2, "warning": 1, "info": 0}[self.value]


PRE_EXISTING_NOTE = "present before gpufleet started"
"""What a detector says of evidence already there at its first look (in the summary and in
`evidence["pre_existing"]`). The engine rewords it by the journal's first watch of the fleet
(remediations.incidents.cold_wording): the detector knows only its own process's clock."""

INTAKE_DETECTOR = "alertmanager"
"""The `detector` of findings made from alerts delivered to gpufleet (the Alertmanager webhook):
evidence from outside, with its own breaker and blast-radius budget."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One detector's statement about one entity at one moment.

    The entity is (kind, node, gpu_uuid, job): GPU kinds set gpu_uuid and node, nccl_hang sets
    job, straggler sets all three, monitoring_gap sets node (or nothing for the whole fleet).
    """

    kind: FindingKind
    severity: Severity
    summary: str
    first_seen: float
    last_seen: float
    node: str | None = None
    gpu_uuid: str | None = None
    job: str | None = None
    evidence: Mapping[str, Any] = field(default_factory=dict)
    recommended_action: str = ""
    detector: str = ""
    pre_existing: bool = False
    """The evidence was already there when gpufleet started watching (an XID held in the
    last-XID gauge at first sight, a counter total with no earlier value): reported, but never
    a reason for an automatic action."""

    @property
    def from_intake(self) -> bool:
        return self.detector == INTAKE_DETECTOR

    @property
    def entity(self) -> tuple[str, str | None, str | None, str | None]:
        """Dedup key: one incident per entity and kind."""
        return (self.kind.value, self.node, self.gpu_uuid, self.job)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "severity": self.severity.value,
            "node": self.node,
            "gpu_uuid": self.gpu_uuid,
            "job": self.job,
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
            "summary": self.summary,
            "evidence": dict(self.evidence),
            "recommended_action": self.recommended_action,
            "pre_existing": self.pre_existing,
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Finding:
        return Finding(
            kind=FindingKind(data["kind"]),
            severity=Severity(data["severity"]),
            summary=str(data.get("summary", "")),
            first_seen=float(data["first_seen"]),
            last_seen=float(data["last_seen"]),
            node=data.get("node"),
            gpu_uuid=data.get("gpu_uuid"),
            job=data.get("job"),
            evidence=dict(data.get("evidence") or {}),
            recommended_action=str(data.get("recommended_action", "")),
            pre_existing=bool(data.get("pre_existing", False)),
        )
