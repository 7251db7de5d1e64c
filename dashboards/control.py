"""What people do from the dashboard, through the same engine and store as the CLI and Slack.

Approve and reject go through `DecisionJournal.approve/reject` (same journal transition,
same audit row, the runner re-checks every gate before anything reaches Kubernetes); pause,
resume and breaker reset through the store's engine-state calls that `gpufleet pause` and
`gpufleet breaker reset` use. Each call checks again that the person may do it (a disabled
button is a hint, not a control) and fails closed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from dashboards import data
from dashboards.shell import Context
from remediations.decision_journal import DecisionJournal
from remediations.policy import load_policy
from remediations.types import ActionState


class NotAllowed(Exception):
    """The person looking may not do this (the message says why)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    message: str


def _check(ctx: Context) -> None:
    if not ctx.can_approve:
        raise NotAllowed(ctx.why_not or "not allowed")


def decide(ctx: Context, cluster: str, action_id: str, approve: bool, reason: str = "") -> Outcome:
    """Approve or reject one action awaiting approval; the journal records who."""
    _check(ctx)
    store = data.store(ctx.url, cluster)
    journal = DecisionJournal(load_policy(ctx.settings.policy), store, started_at=time.time())
    try:
        if approve:
            done = journal.approve(action_id, ctx.actor, time.time())
        else:
            done = journal.reject(action_id, ctx.actor, time.time(), reason)
    except (LookupError, ValueError) as exc:
        return Outcome(False, str(exc))
    finally:
        data.changed()
    if done.state is ActionState.EXPIRED:
        return Outcome(False, f"{done.id}: not approved, {done.result}")
    return Outcome(True, f"{done.id}: {done.state.value} by {ctx.actor}")


def set_paused(ctx: Context, cluster: str, paused: bool, reason: str = "") -> Outcome:
    _check(ctx)
    store = data.store(ctx.url, cluster)
    store.set_paused(paused, ctx.actor, reason or "from the dashboard", time.time())
    data.changed()
    return Outcome(True, f"cluster {cluster}: automation {'paused' if paused else 'resumed'}")


def reset_breaker(ctx: Context, cluster: str) -> Outcome:
    _check(ctx)
    was = data.store(ctx.url, cluster).reset_breaker(ctx.actor, time.time())
    data.changed()
    note = "" if was else " (was not tripped)"
    return Outcome(True, f"cluster {cluster}: breaker reset{note}")
