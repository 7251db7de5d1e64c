"""One live remediation cycle, wired: read the cluster, decide and journal, then act.

The composition the service (scheduler job), the demo and tests share, so none of them
re-assembles decision journal, executor and actuator by hand. `tick(findings, now)` is one
cycle; the actuator supplies both the cluster view and the writes.

With `background=True` acting happens outside the cycle: `tick` decides and journals, then
wakes an `ExecutorThread` that carries out the journal's approved and interrupted actions, so a
drain waiting on PodDisruptionBudgets never delays the next detection cycle. `close()` stops it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from detectors.findings import Finding
from remediations.capabilities import LiveActuator
from remediations.cluster_view import ClusterView
from remediations.decision_journal import DecisionJournal
from remediations.decisions import CycleResult
from remediations.executor import Executor
from remediations.executor_thread import ExecutorThread
from remediations.holds import reconcile
from remediations.incidents import IncidentChange
from remediations.policy import Policy
from remediations.store import ActionRecord, Store


@dataclass(frozen=True, slots=True)
class TakeOver:
    """What `take_over` changed: duplicate incidents it resolved, claims it ended."""

    changes: tuple[IncidentChange, ...]
    claims: tuple[ActionRecord, ...]


class RemediationCycle:
    """What schedules remediation in a live process: each `tick` runs the decision journal on
    the cycle's findings, then the executor (inline, or woken in its background thread)."""

    def __init__(
        self,
        policy: Policy,
        store: Store,
        actuator: LiveActuator,
        owner: str,
        *,
        started_at: float,
        shadow: bool = False,
        clock: Callable[[], float] | None = None,
        background: bool = False,
        idle_wait: float = 5.0,
        dry_run: bool = False,
        may_act: Callable[[], bool] | None = None,
    ) -> None:
        """`clock`: the journal's clock (`now` comes from it); the runner reads it to renew its
        lease during a long step, and the background executor to stamp its passes (required
        with `background=True`). `idle_wait`: wall seconds between unprompted executor passes.
        `shadow`: every rule in shadow whatever the policy says (`dry_run` is its deprecated
        name). `may_act`: asked before each background pass (the service: leader and not
        stopping); also settable later with `gate`."""
        self.actuator = actuator
        self._judged: set[str] = set()
        """Actions whose need a scheduled job judged itself (see `judged_by_job`)."""
        self.engine = DecisionJournal(
            policy, store, started_at=started_at, shadow=shadow or dry_run
        )
        self.runner = Executor(
            policy, store, actuator, owner, open_incidents=self.engine.open_incident_ids,
            clock=clock,
        )  # fmt: skip
        self.worker: ExecutorThread | None = None
        if background:
            if clock is None:
                raise ValueError("a background executor needs the journal's clock")
            self.worker = ExecutorThread(
                self.runner,
                actuator.cluster_view,
                clock,
                fresh=self.still_needed,
                idle_wait=idle_wait,
                may_act=may_act,
            )

    def gate(self, may_act: Callable[[], bool]) -> None:
        """Set what the background executor asks before each pass (no effect inline), and what
        a long step asks at each keep-alive (False ends the step, the action parked)."""
        self.runner.may_continue = may_act
        if self.worker is not None:
            self.worker.may_act = may_act

    def take_over_claims(self, now: float, why: str) -> list[ActionRecord]:
        """End the claims the previous leader held and wake the executor, so its unfinished
        actions resume now (resuming reads only the journal: no incident state is needed)."""
        claims = self.runner.take_over_claims(now, why)
        if claims and self.worker is not None:
            self.worker.start().wake()  # resume now, not after the first cycle as leader
        return claims

    def take_over(self, now: float, why: str) -> TakeOver:
        """What a process that just became leader does before it decides or acts: end the
        claims the previous leader held, so its unfinished actions resume at once, and read the
        open incidents from the journal again (adopting duplicates earlier failovers left)."""
        claims = self.take_over_claims(now, why)
        ended = self.engine.reload(now, self.runner.owner)
        return TakeOver(tuple(ended), tuple(claims))

    def on_acted(self, report: Callable[[list[ActionRecord]], None]) -> None:
        """Called with what each background pass started, resumed or finished (inline, `tick`
        returns it instead)."""
        if self.worker is not None:
            self.worker.on_touched = report

    def judged_by_job(self, action_id: str) -> None:
        """A scheduled job journals this action and has judged its need itself (a quarantined
        node's diagnosis needs no open incident): the executor skips the open-incident check
        for it. Call before journaling it, so no executor pass can see it unmarked."""
        self._judged.add(action_id)

    def still_needed(self, action: ActionRecord) -> str | None:
        """The executor's freshness check: the journal's (its incident still open in the
        latest cycle's data), except for actions a scheduled job judged itself."""
        return None if action.id in self._judged else self.engine.still_needed(action)

    def act(self, now: float, view: ClusterView | None = None) -> list[ActionRecord]:
        """Carry out what the journal says is approved or interrupted: wake the background
        executor (returns at once, nothing touched) or run the executor inline. Nothing when
        no decision can reach Kubernetes (every rule in shadow)."""
        if not self.engine.may_write:
            return []
        if self.worker is not None:
            self.worker.start().wake()
            return []
        return self.runner.run(
            view or self.actuator.cluster_view(now), now, fresh=self.still_needed
        )

    def tick(
        self, findings: Sequence[Finding], now: float, view: ClusterView | None = None
    ) -> tuple[CycleResult, list[ActionRecord]]:
        """Decide on this cycle's findings, then start/resume what is approved and allowed
        (in the background executor when there is one: then nothing is returned as touched).
        Shadow decisions are journaled as what would be done; when no rule is live (or shadow
        is forced) the runner does not run at all, so nothing is written to Kubernetes."""
        seen = view or self.actuator.cluster_view(now)
        result = self.engine.cycle(findings, seen, now)
        reconcile(self.engine.store, seen, now)  # every hold has an owner, or is reported
        return result, self.act(now)

    def settle(self, timeout: float = 10.0) -> bool:
        """With a background executor: wait for the pass the latest tick asked for."""
        return self.worker.settle(timeout) if self.worker is not None else True

    def close(self, timeout: float = 30.0) -> bool:
        """Stop the background executor after its current pass; False if it is still busy
        after `timeout`."""
        return self.worker.stop(timeout) if self.worker is not None else True


RemediationLoop = RemediationCycle
"""Deprecated name of `RemediationCycle` (kept for callers outside gpufleet)."""
