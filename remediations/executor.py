"""Carrying out approved actions through the actuator, crash-safely and exactly once.

For each approved action the runner re-checks the gates against the current view (pause, breaker,
window, blast radius, rate, protection, ownership, and for a return to service the journal's
diagnostic verdict: `remediations.validation`) and the caller's freshness check, claims it
(`approved -> executing`, version-checked, with a lease), then for each plan step:

1. asks the actuator to *pin* the intent (resolve pod UIDs) and journals the pinned intent and
   `step_started` — before any write;
2. applies it (idempotent, with UID preconditions);
3. journals `progress = step + 1`.

Killed anywhere (kill -9), a restarted runner with the same owner (or any runner after the lease)
resumes at `progress` with the pinned intent, so each write takes effect exactly once. Then it
verifies, and on failure runs the playbook's rollback steps the same way.

While a step runs long (a drain waiting on PodDisruptionBudgets, up to its timeout) the actuator
calls back at each back-off and the runner renews its lease on the action (`clock` time), so no
runner in another process resumes it mid-drain; within this process, an action being carried
out is never resumed by a second pass (a scheduled job's, or the background executor's).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

from errors import PermanentError, TemporaryError
from remediations import gates
from remediations.capabilities import Actuator, WriteContext
from remediations.cluster_view import ClusterView
from remediations.decision_journal import summarize
from remediations.escalation import escalated_start
from remediations.gates import Fleet
from remediations.holds import marked_by_us
from remediations.playbooks import PLAYBOOKS, Plan, VerifyStatus
from remediations.policy import Policy
from remediations.repeats import REPAIRING, lemon
from remediations.staleness import stale_reason
from remediations.store import ActionRecord, Store
from remediations.types import ActionState, Actuation, Intent
from remediations.validation import NEEDS_PERSON, validation_for

FreshnessCheck = Callable[[ActionRecord], str | None]
"""Right before acting: why the action is no longer needed (e.g. the finding is gone from current
data), or None if it still is."""


CONFIRMING = frozenset({"await_reboot"})
"""Steps that only confirm a change already made (and tidy up after it): the executor still
runs these past `execute_timeout`, so an action that finished while no pass ran is not failed."""


def _confirms_only(a: ActionRecord) -> bool:
    return all(i.op in CONFIRMING for i in a.plan[a.progress :])


def plan_of(a: ActionRecord) -> Plan:
    return Plan(a.playbook, a.target, a.plan, a.disruptive, a.target_nodes)


class _Claim:
    """The runner's hold on one action while a step runs: each `renew` extends the lease."""

    def __init__(self, runner: Executor, action: ActionRecord, now: float) -> None:
        self.runner = runner
        self.action = action
        self.now = now
        self.began = time.monotonic()

    def renew(self) -> None:
        r = self.runner
        t = r.clock() if r.clock is not None else self.now + time.monotonic() - self.began
        if not r.may_continue():
            raise TemporaryError(
                f"{r.owner} no longer leads; action {self.action.id} waits for the next leader"
            )
        renewed = r.store.renew_lease(self.action, t, r.owner, t + r.lease_seconds)
        if renewed is None:
            raise TemporaryError(f"lost the claim on action {self.action.id}; stopping")
        self.action = renewed


class Executor:
    """Carries out the journal's approved and interrupted actions through the one actuator:
    re-gates, claims, pins -> journals -> writes -> journals each step, verifies, rolls back."""

    def __init__(
        self,
        policy: Policy,
        store: Store,
        actuator: Actuator,
        owner: str,
        *,
        lease_seconds: float = 300.0,
        open_incidents: Callable[[], set[str]] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.policy = policy
        self.store = store
        self.actuator = actuator
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.open_incidents = open_incidents or (lambda: set())
        self.clock = clock
        """The journal's clock (the one `now` comes from), read while a step runs to renew the
        lease; None: `now` plus the wall time the step has taken so far."""
        self.may_continue: Callable[[], bool] = lambda: True
        """Asked at each keep-alive of a long step: False (this process stopped leading, or is
        stopping) ends the step at once, the action parked at its journaled step."""
        self._busy: set[str] = set()
        self._busy_lock = threading.Lock()
        store.ensure_state()

    def take_over_claims(self, now: float, why: str) -> list[ActionRecord]:
        """End other owners' claims on unfinished actions now, so the next pass resumes each at
        its journaled step. Only for a process that just became leader: the previous holder
        stopped acting before the Lease could move (its renew deadline), so waiting out the
        action lease (minutes) would only stall the action. The journal's version check still
        refuses a late write by the old owner, so each step takes effect once."""
        taken: list[ActionRecord] = []
        for a in self.store.actions([ActionState.EXECUTING, ActionState.VERIFYING]):
            owner = a.lease_owner
            if owner in (None, self.owner) or (a.lease_until or 0.0) <= now:
                continue
            done = self.store.update_action(
                a,
                now,
                lease_until=now,
                actor=self.owner,
                audit_kind="takeover",
                message=f"claim of {owner} ended by {self.owner} at step {a.progress}: {why}",
            )
            if done is not None:
                taken.append(done)
        return taken

    @contextmanager
    def _carrying(self, action_id: str) -> Iterator[bool]:
        """True (and held until the block ends) unless this process already carries it out."""
        with self._busy_lock:
            mine = action_id not in self._busy
            self._busy.add(action_id)
        try:
            yield mine
        finally:
            if mine:
                with self._busy_lock:
                    self._busy.discard(action_id)

    def carrying(self) -> frozenset[str]:
        """Ids of the actions this runner is carrying out right now (any thread)."""
        with self._busy_lock:
            return frozenset(self._busy)

    # ---- selection -----------------------------------------------------------------------------

    def run(
        self, view: ClusterView, now: float, fresh: FreshnessCheck | None = None
    ) -> list[ActionRecord]:
        """One pass: resume what was interrupted, then start what is approved and allowed.

        While automation is paused or the breaker is tripped, nothing moves at all (not even an
        interrupted drain): a person has said stop, or the fleet looks wrong."""
        touched: list[ActionRecord] = []
        state = self.store.engine_state()
        if state.paused or state.breaker_tripped:
            return touched
        for a in self.store.actions([ActionState.EXECUTING, ActionState.VERIFYING]):
            if self._shadow(a):
                continue  # the policy went to shadow mid-action: write nothing, a person looks
            if a.lease_owner == self.owner or (a.lease_until or 0.0) <= now:
                with self._carrying(a.id) as free:
                    if not free:
                        continue  # another pass of this process is carrying it out
                    mine = self.store.update_action(
                        a,
                        now,
                        lease_owner=self.owner,
                        lease_until=now + self.lease_seconds,
                        audit_kind="resume",
                        message=f"resumed by {self.owner} at step {a.progress}",
                    )
                    if mine is not None:
                        touched.append(self._advance(mine, now))
        disrupted: set[str] = set()
        for a in self.store.actions([ActionState.APPROVED]):
            if self._shadow(a):
                self.store.update_action(
                    a,
                    now,
                    state=ActionState.EXPIRED,
                    result="shadow: not executed (the policy now says actuation: shadow)",
                    message="approved -> expired (actuation: shadow)",
                )
                continue
            started = self._try_start(a, view, now, fresh, disrupted)
            if started is not None:
                touched.append(started)
                if started.disruptive:
                    disrupted.update(started.target_nodes)
        return touched

    def _shadow(self, a: ActionRecord) -> bool:
        """Whether the action's rule (or, for an action no rule decided, the policy) is in
        shadow under the current policy: then the runner never writes for it."""
        rule = self.policy.rule_named(a.rule)
        return a.dry_run or self.policy.actuation_of(rule) is Actuation.SHADOW

    def _try_start(
        self,
        a: ActionRecord,
        view: ClusterView,
        now: float,
        fresh: FreshnessCheck | None,
        disrupted: set[str],
    ) -> ActionRecord | None:
        state = self.store.engine_state()  # read first: any start after this fails the claim
        g = self.policy.gates
        horizon = now - max(g.attempts.window, 3600.0, g.attempts.cooldown)
        briefs = self.store.briefs(horizon)
        summary = summarize(briefs, self.open_incidents(), exclude=a.id, now=now)
        alerted = any(b.id == a.id and b.from_intake for b in briefs)
        radius = self.policy.intake.blast_radius if alerted else None  # the intake's budget
        fleet = Fleet.of(view, g.pool_label)
        fleet = Fleet(
            fleet.gpu_nodes, fleet.unschedulable | disrupted, fleet.pool_of, fleet.pool_size
        )
        plan = plan_of(a)
        if a.playbook == "uncordon":
            nodes = [view.nodes.get(n) for n in a.target_nodes]
            plan = Plan(
                plan.playbook,
                plan.target,
                plan.intents,
                False,
                plan.target_nodes,
                undo=True,
                owned=all(n is not None and marked_by_us(n) for n in nodes),
            )
        checks = [
            gates.protected(g.protected, plan, view),
            gates.ownership(plan),
            gates.validated(plan, validation_for(self.store, plan, now, g)),
            gates.attempts(g.attempts, a.playbook, a.target, summary.ledger, now),
            *gates.execution_gates(g, plan, fleet, state, summary.ledger, now, radius),
        ]
        failed = gates.first_failure(checks)
        if failed is not None:
            if failed.outcome is gates.Outcome.ESCALATE:  # the budget was spent meanwhile
                asked = escalated_start(self.store, a, f"{failed.gate}: {failed.reason}")
                if asked is not None:
                    kind, message = asked.pop("kind"), asked.pop("message")
                    self.store.audit(now, kind, message, action_id=a.id, **asked)
            if failed.outcome is gates.Outcome.DENY or failed.outcome is gates.Outcome.ESCALATE:
                self.store.update_action(
                    a,
                    now,
                    state=ActionState.EXPIRED,
                    result=f"{failed.gate}: {failed.reason}",
                    message=f"approved -> expired ({failed.gate}: {failed.reason})",
                )
            return None  # WAIT: leave it approved, look again next pass
        worn = self._lemon(a, now) if a.playbook in REPAIRING else None
        if worn is not None:
            self.store.audit(now, NEEDS_PERSON, worn, action_id=a.id, target=a.target)
            self.store.update_action(
                a, now, state=ActionState.EXPIRED, result=f"lemon: {worn}",
                message=f"approved -> expired (lemon: {worn})",
            )  # fmt: skip
            return None
        why_not = stale_reason(self.store, a, incident=False)
        if why_not is None and fresh is not None:
            why_not = fresh(a)
        if why_not is not None:
            self.store.update_action(
                a,
                now,
                state=ActionState.EXPIRED,
                result=f"no longer needed: {why_not}",
                message=f"approved -> expired (freshness: {why_not})",
            )
            return None
        with self._carrying(a.id) as free:
            if not free:
                return None
            claimed = self.store.claim(a, state.version, now, self.owner, now + self.lease_seconds)
            return self._advance(claimed, now) if claimed is not None else None

    # ---- execution -----------------------------------------------------------------------------

    def _advance(self, a: ActionRecord, now: float) -> ActionRecord:
        pb = PLAYBOOKS[a.playbook]
        params = pb.params(a.params)
        if a.phase.startswith("rollback"):
            ran = self._steps(a, now)
            if ran is None or ran.state.terminal or ran.progress < len(ran.plan):
                return ran or a
            return (
                self.store.update_action(
                    ran,
                    now,
                    state=ActionState.ROLLED_BACK,
                    message=f"{ran.state.value} -> rolled_back",
                )
                or ran
            )
        if a.state is ActionState.EXECUTING:
            started = a.started_at if a.started_at is not None else a.created_at
            late = now - started > params.execute_timeout
            timed_out = f"still executing after {params.execute_timeout:.0f}s"
            if late and not _confirms_only(a):  # past the timeout nothing new is started
                return self._fail(a, now, timed_out)
            ran = self._steps(a, now)  # completion first: a finished reboot is not timed out
            if ran is None or ran.state is not ActionState.EXECUTING:
                return ran or a
            if ran.phase.startswith("rollback"):
                return ran
            if ran.progress < len(ran.plan):  # a temporary error: next pass, unless too late
                return self._fail(ran, self._time(now), timed_out) if late else ran
            now = self._time(now)
            nxt = self.store.update_action(
                ran, now, state=ActionState.VERIFYING, deadline=now + params.verify_timeout
            )
            if nxt is None:
                return ran
            a = nxt
        if a.state is ActionState.VERIFYING:
            v = pb.verify(a.plan, self.actuator, params)
            now = self._time(now)
            if v.status is VerifyStatus.OK:
                return (
                    self.store.update_action(
                        a,
                        now,
                        state=ActionState.DONE,
                        result=v.detail,
                        message=f"verifying -> done: {v.detail}",
                    )
                    or a
                )
            if v.status is VerifyStatus.FAILED or now >= (a.deadline or now):
                return self._fail(a, now, f"verification failed: {v.detail}")
        return a

    def _steps(self, a: ActionRecord, now: float) -> ActionRecord | None:
        ctx = WriteContext(a.id, a.incident_id, a.playbook, a.reasons[0] if a.reasons else "")
        while a.progress < len(a.plan):
            now = self._time(now)
            i = a.progress
            try:
                intent = a.plan[i] if a.step_started == i else self.actuator.pin(a.plan[i])
            except TemporaryError as exc:  # pinning reads the cluster: retried next pass
                self.store.audit(
                    now, "k8s_write", f"pinning {a.plan[i].op} {a.plan[i].target} will be "
                    f"retried: {exc}", action_id=a.id, target=a.plan[i].target,
                )  # fmt: skip
                return a
            except PermanentError as exc:  # nothing was written for this step
                return self._fail(a, now, f"{a.plan[i].op} {a.plan[i].target}: {exc}")
            plan = [*a.plan[:i], intent, *a.plan[i + 1 :]]
            journaled = self.store.update_action(
                a,
                now,
                plan=[p.to_json() for p in plan],
                step_started=i,
                lease_until=now + self.lease_seconds,
                audit_kind="k8s_write",
                message=f"about to {intent.op} {intent.target}",
                detail=intent.to_json(),
            )
            if journaled is None:
                return None  # someone else moved it: stop
            a = journaled
            claim = _Claim(self, a, now)
            try:
                did = self.actuator.apply(intent, replace(ctx, keepalive=claim.renew))
            except TemporaryError as exc:
                a = claim.action
                now = self._time(now)
                self.store.audit(
                    now,
                    "k8s_write",
                    f"{intent.op} {intent.target} will be retried: {exc}",
                    action_id=a.id,
                    target=intent.target,
                )
                return a
            except PermanentError as exc:
                now = self._time(now)
                return self._fail(claim.action, now, f"{intent.op} {intent.target}: {exc}")
            a = claim.action
            now = self._time(now)  # the row says when the write happened, not the pass began
            done = self.store.update_action(
                a,
                now,
                progress=i + 1,
                step_started=None,
                audit_kind="k8s_write",
                message=f"did {intent.op} {intent.target}: {did}",
                detail=intent.to_json(),
            )
            if done is None:
                return None
            a = done
        return a

    def _time(self, fallback: float) -> float:
        """The journal clock now (a step may take minutes), or `fallback` without a clock."""
        return self.clock() if self.clock is not None else fallback

    def _fail(self, a: ActionRecord, now: float, reason: str) -> ActionRecord:
        if a.phase.startswith("rollback"):
            return (
                self.store.update_action(
                    a, now, state=ActionState.FAILED, result=f"rollback failed: {reason}"
                )
                or a
            )
        pb = PLAYBOOKS[a.playbook]
        undo = pb.rollback(a.plan[: min(len(a.plan), a.progress + 1)])
        if not undo:
            return (
                self.store.update_action(
                    a,
                    now,
                    state=ActionState.FAILED,
                    result=reason,
                    message=f"{a.state.value} -> failed: {reason}",
                )
                or a
            )
        kept = self._kept_out(a, undo, now, reason)
        if kept is not None:
            return kept
        rolling = self.store.update_action(
            a,
            now,
            phase=f"rollback:{len(a.plan)}",
            plan=[p.to_json() for p in (*a.plan, *undo)],
            progress=len(a.plan),
            step_started=None,
            result=reason,
            message=f"rolling back: {reason}",
        )
        return self._advance(rolling, now) if rolling is not None else a

    def _lemon(self, a: ActionRecord, now: float) -> str | None:
        g = self.policy.gates
        node = a.target_nodes[0] if a.target_nodes else None
        return lemon(self.store, a.target, node, g.lemon_window, g.lemon_repeats, now)

    def _kept_out(
        self, a: ActionRecord, undo: tuple[Intent, ...], now: float, reason: str
    ) -> ActionRecord | None:
        """A rollback that would give capacity back goes through the one return rule like any
        other return: refused (a half-done fence of a faulty GPU), the action fails with what
        it took still held, and a person is told (None: the rollback may run)."""
        back = Plan(a.playbook, a.target, tuple(undo), False, a.target_nodes)
        if not gates.returns_to_service(back):
            return None
        check = gates.validated(back, validation_for(self.store, back, now, self.policy.gates))
        if check.ok:
            return None
        why = (
            f"{a.playbook} on {a.target} failed midway ({reason}); undoing it would return it "
            f"to service, which the return rule refuses ({check.reason}): what it took stays "
            "held until a diagnostic passes or a person looks"
        )
        self.store.audit(
            now, NEEDS_PERSON, why, action_id=a.id, target=a.target,
            detail={"node": a.target_nodes[0] if a.target_nodes else "", "reason": reason},
        )  # fmt: skip
        return (
            self.store.update_action(
                a,
                now,
                state=ActionState.FAILED,
                result=f"{reason}; kept out of service, not rolled back: {check.reason}",
                message=f"{a.state.value} -> failed: {reason} (rollback refused by the return "
                "rule)",
            )
            or a
        )


Runner = Executor
"""Deprecated name of `Executor` (dashboards' test seed still uses it)."""

__all__ = ["Executor", "FreshnessCheck", "Intent", "Runner", "plan_of"]
