"""One live remediation cycle, wired: read the cluster, decide and journal, then act.

The composition the service (scheduler job), the demo and tests share, so none of them
re-assembles engine, runner and actuator by hand. `tick(findings, now)` is one cycle; the
actuator supplies both the cluster view and the writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from detectors.findings import Finding
from remediations.actuator_api import Actuator
from remediations.cluster_view import ClusterView
from remediations.decision_journal import RemediationEngine
from remediations.decisions import CycleResult
from remediations.executor import Runner
from remediations.policy import Policy
from remediations.store import ActionRecord, Store


class LiveActuator(Actuator, Protocol):
    def cluster_view(self, taken_at: float = 0.0) -> ClusterView: ...


class RemediationLoop:
    def __init__(
        self,
        policy: Policy,
        store: Store,
        actuator: LiveActuator,
        owner: str,
        *,
        started_at: float,
        shadow: bool = False,
    ) -> None:
        self.actuator = actuator
        self.engine = RemediationEngine(policy, store, started_at=started_at, shadow=shadow)
        self.runner = Runner(
            policy, store, actuator, owner, open_incidents=self.engine.open_incident_ids
        )

    def tick(
        self, findings: Sequence[Finding], now: float, view: ClusterView | None = None
    ) -> tuple[CycleResult, list[ActionRecord]]:
        """Decide on this cycle's findings, then start/resume what is approved and allowed.
        Shadow decisions are journaled as what would be done; when no rule is live (or shadow
        is forced) the runner does not run at all, so nothing is written to Kubernetes."""
        result = self.engine.cycle(findings, view or self.actuator.cluster_view(now), now)
        if not self.engine.may_write:
            return result, []
        touched = self.runner.run(
            self.actuator.cluster_view(now), now, fresh=self.engine.still_needed
        )
        return result, touched
