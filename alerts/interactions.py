"""What people do in Slack: Approve/Reject buttons and the `/gpufleet` slash command.

Every request arrives here already verified (signature, time window, not a replay). The clicker
must be on the approver allowlist (user IDs and/or a user group); an empty list or a failed
group lookup means no (fails closed), and the clicker is told so in an ephemeral message while
nothing changes. Decisions go through the engine's `approve`/`reject`, the very calls the CLI
makes (same journal, same audit, and the runner re-checks every gate before acting); a second
click or a replay finds the action decided and only says so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy.orm import Session

from alerts.alerts_config import AlertsConfig
from alerts.alerts_store import AlertsStore
from alerts.blocks import APPROVE, REJECT, esc, when
from alerts.notify import Notifier
from alerts.timeline import actor_label
from remediations.decision_journal import DecisionJournal
from remediations.store import Store
from remediations.types import ActionState

log = logging.getLogger(__name__)
GROUP_CACHE = 60.0


class BadRequest(Exception):
    """Malformed payload: answer 400, change nothing."""


def _ephemeral(text: str) -> dict[str, Any]:
    return {"response_type": "ephemeral", "text": text}


class Interactions:
    def __init__(
        self,
        cfg: AlertsConfig,
        journal: Store,
        engine: DecisionJournal,
        astore: AlertsStore,
        notifier: Notifier,
        group_members: Callable[[str], set[str]] | None = None,
    ) -> None:
        self.cfg = cfg
        self.journal = journal
        self.engine = engine
        self.astore = astore
        self.notifier = notifier
        self.group_members = group_members
        self._group: tuple[float, set[str]] = (-1e18, set())

    # ---- who may ------------------------------------------------------------------------------

    def authorised(self, user_id: str) -> bool:
        ap = self.cfg.slack.approvers
        if user_id and user_id in ap.users:
            return True
        if not user_id or ap.usergroup is None or self.group_members is None:
            return False
        at, members = self._group
        now = time.monotonic()
        if now - at > GROUP_CACHE:
            try:
                members = self.group_members(ap.usergroup)
            except Exception as exc:  # fail closed: no lookup, no approval
                log.warning("approver group %s lookup failed: %s", ap.usergroup, exc)
                return False
            self._group = (now, members)
        return user_id in members

    # ---- buttons ------------------------------------------------------------------------------

    def on_block_action(self, payload: Mapping[str, Any], now: float) -> dict[str, Any]:
        try:
            user = payload["user"]
            uid, name = str(user["id"]), str(user.get("username") or user.get("name") or "")
            act = payload["actions"][0]
            verb, action_id = str(act["action_id"]), str(act["value"])
            channel = str((payload.get("channel") or {}).get("id", ""))
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise BadRequest(f"not a block_actions payload ({exc!r})") from None
        if payload.get("type") != "block_actions" or verb not in (APPROVE, REJECT):
            raise BadRequest("not a gpufleet button")
        if not self.authorised(uid):
            log.warning(
                "slack: %s (%s) pressed %s on %s: not an approver", uid, name, verb, action_id
            )
            self._tell(
                channel, uid, now, "You are not on gpufleet's approver list; nothing was changed."
            )
            return {}
        text = self.decide(action_id, verb == APPROVE, uid, name, now)
        self._tell(channel, uid, now, text)
        return {}

    def _tell(self, channel: str, uid: str, now: float, text: str) -> None:
        if not channel:
            return
        with Session(self.astore.engine) as s, s.begin():
            self.astore.enqueue(
                s,
                now,
                f"ephemeral:{uid}",
                "ephemeral",
                channel=channel,
                severity="critical",
                payload={"text": text, "user": uid},
            )

    def decide(self, action_id: str, approve: bool, uid: str, name: str, now: float) -> str:
        """Approve or reject through the engine; idempotent (a repeat only reports)."""
        hits = self.journal.find_actions(action_id)
        if len(hits) != 1:
            return f"No single action with id `{action_id}` ({len(hits)} found); nothing changed."
        a = hits[0]
        prompt = self.astore.prompt(a.id)
        expired = (prompt is not None and now > prompt.expires_at) or (
            a.deadline is not None and now > a.deadline
        )
        if a.state is not ActionState.AWAITING_APPROVAL:
            by = f" by {actor_label(a.approved_by)}" if a.approved_by else ""
            at = when(a.updated_at)
            return f"Action `{a.id}` is already {a.state.value}{by} ({at}); nothing changed."
        if expired:
            return f"The approval for `{a.id}` expired; nothing changed."
        actor = f"slack:{uid} ({name})" if name else f"slack:{uid}"
        try:
            done = (
                self.engine.approve(a.id, actor, now)
                if approve
                else self.engine.reject(a.id, actor, now, "rejected in Slack")
            )
        except (ValueError, LookupError) as exc:
            return f"{exc}; nothing changed."
        with Session(self.astore.engine, expire_on_commit=False) as s, s.begin():
            self.notifier.timeline.settle_prompt(
                s, a.id, done.state.value, f"<@{uid}>", now, a.playbook, a.target, now
            )
        if done.state is ActionState.EXPIRED:
            return (
                f"{a.playbook} on `{esc(a.target)}`: not approved, {done.result}; nothing changed."
            )
        return f"{a.playbook} on `{esc(a.target)}`: {done.state.value} by <@{uid}>."

    # ---- /gpufleet ---------------------------------------------------------------------------

    def on_slash(self, form: Mapping[str, str], now: float) -> dict[str, Any]:
        uid, name = form.get("user_id", ""), form.get("user_name", "")
        if not uid or "text" not in form:
            raise BadRequest("not a slash command payload")
        words = form["text"].split()
        verb = words[0].lower() if words else "help"
        if not self.authorised(uid):
            log.warning("slack: %s (%s) ran /gpufleet %s: not an approver", uid, name, verb)
            return _ephemeral("You are not on gpufleet's approver list; nothing was changed.")
        actor = f"slack:{uid} ({name})" if name else f"slack:{uid}"
        rest = " ".join(words[1:])
        if verb == "status":
            return _ephemeral(self._status())
        if verb in ("pause", "resume"):
            self.journal.set_paused(verb == "pause", actor, rest or "from Slack", now)
            state = self.journal.engine_state()
            return _ephemeral(
                f"Automation {'paused' if state.paused else 'running'} ({actor_label(actor)})."
            )
        if verb == "actions":
            return _ephemeral(self._actions())
        if verb in ("approve", "reject") and words[1:]:
            return _ephemeral(self.decide(words[1], verb == "approve", uid, name, now))
        return _ephemeral(
            "usage: /gpufleet status | pause [reason] | resume | actions | approve ID | reject ID"
        )

    def _status(self) -> str:
        st = self.journal.engine_state()
        open_n = len(self.journal.open_incidents())
        waiting = len(self.journal.actions([ActionState.AWAITING_APPROVAL]))
        running = len(self.journal.actions([ActionState.EXECUTING, ActionState.VERIFYING]))
        auto = f"paused by {actor_label(st.paused_by)}" if st.paused else "running"
        breaker = f"TRIPPED ({esc(st.breaker_reason)})" if st.breaker_tripped else "closed"
        return (
            f"cluster *{esc(self.journal.cluster)}*: automation {auto}; breaker {breaker}; "
            f"{open_n} open incidents; {waiting} awaiting approval; {running} executing"
        )

    def _actions(self) -> str:
        acts = self.journal.active_actions()
        if not acts:
            return "No active actions."
        return "\n".join(
            f"`{a.id[:12]}` {a.state.value} {a.playbook} on `{esc(a.target)}`" for a in acts[:30]
        )
