"""Journal events -> the thread: decisions, approvals, transitions, and approval prompts.

Read from the audit log after a stored cursor (so approvals made on the CLI or the dashboard show
up too, and a restart misses nothing), turned into thread lines of the incident's message;
an action awaiting approval gets a prompt with buttons (not during a fleet-wide storm: one line
says how many wait); `settle_prompt` shows a prompt's outcome once, whoever decided.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from alerts import blocks
from alerts.alerts_config import AlertsConfig
from alerts.alerts_store import AlertsStore
from database.tables.alerts import MessageRow, PromptRow
from remediations.store import IncidentRecord, Store
from remediations.store.records import AuditRecord

CONTROL_LANE = "control"

Assign = Callable[[Session, Iterable[IncidentRecord], dict[str, str], float, set[str]], None]
Enqueue = Callable[..., None]


def actor_label(actor: str) -> str:
    """`slack:U123 (alice)` -> a Slack mention; anything else as it is."""
    m = re.match(r"slack:([UW][A-Z0-9]+)", actor)
    return f"<@{m.group(1)}>" if m else blocks.esc(actor)


class Timeline:
    def __init__(
        self,
        cfg: AlertsConfig,
        journal: Store,
        astore: AlertsStore,
        assign: Assign,
        enqueue: Enqueue,
    ) -> None:
        self.cfg = cfg
        self.journal = journal
        self.astore = astore
        self.assign = assign
        self.enqueue = enqueue
        self._prompts: list[tuple[str, dict[str, Any]]] = []
        self._storm_waiting: dict[str, int] = {}
        self._storms: set[str] = set()
        """Open storm messages (their actions get no buttons)."""

    def finish(self, s: Session, now: float, lines: dict[str, list[str]]) -> None:
        """After the cycle's messages: the storm line, then the thread replies, then prompts."""
        for mid, n in self._storm_waiting.items():
            lines[mid].append(
                f":raising_hand: {n} actions await approval; no buttons during a fleet-wide "
                "storm: check the cause, then `/gpufleet approve ID` or the dashboard"
            )
        self._storm_waiting.clear()
        for mid, ls in lines.items():
            self.enqueue(s, now, mid, "reply", blocks.thread_reply(ls))
        for mid, payload in self._prompts:
            self.enqueue(s, now, mid, "prompt", payload, severity="critical")
        self._prompts.clear()

    # ---- journal events ----------------------------------------------------------------------

    def read(self, s: Session, now: float, lines: dict[str, list[str]], created: set[str]) -> None:
        """Audit rows after the stored cursor -> thread lines and prompts (cursor moved)."""
        cursor = self.astore.cursor(s)
        rows = self.journal.audit_log(after_id=cursor.audit_after, limit=5000)
        if not rows:
            return
        cursor.audit_after = rows[-1].id
        wanted = {r.incident_id for r in rows if r.incident_id}
        where = self.astore.message_of(s, wanted)
        missing = [
            i for i in (self.journal.get_incident(x) for x in wanted - set(where)) if i is not None
        ]
        if missing:
            self.assign(s, missing, where, now, created)
        s.flush()
        self._storms = set(
            s.scalars(
                select(MessageRow.id).where(
                    MessageRow.cluster == self.astore.cluster,
                    MessageRow.status == "open",
                    MessageRow.group_key.endswith("|storm"),
                )
            )
        )
        for r in rows:
            self._event(s, r, now, where, lines)

    def _event(
        self,
        s: Session,
        r: AuditRecord,
        now: float,
        where: dict[str, str],
        lines: dict[str, list[str]],
    ) -> None:
        if r.kind in ("control", "breaker", "needs_person"):
            icon = ":wrench:" if r.kind == "needs_person" else ":octagonal_sign:"
            text = f"{icon} {blocks.esc(r.message)} ({actor_label(r.actor)}, {blocks.when(r.at)})"
            self.astore.enqueue(
                s,
                now,
                CONTROL_LANE,
                "post",
                channel=self.cfg.slack.default_channel,
                severity="critical",
                payload={"text": text},
            )
            return
        mid = where.get(r.incident_id or "")
        if mid is None or r.kind == "k8s_write":
            return
        who = actor_label(r.actor)
        message = blocks.esc(r.message)  # journal messages quote alert text and names
        if r.kind == "decision":
            if not r.action_id:  # a notify-only rule refused nothing: no "no entry" sign
                icon = ":bell:" if r.detail.get("notify_only") else ":no_entry_sign:"
                lines[mid].append(f"{icon} {message}")
                return
            state = str(r.detail.get("state", ""))
            dry = " (dry-run, not executed)" if r.detail.get("dry_run") else ""
            lines[mid].append(f":hammer_and_wrench: action proposed: {message}{dry}")
            if state == "awaiting_approval":
                if mid in self._storms:
                    # no wall of buttons in a storm: a person looks at the whole first
                    self._storm_waiting[mid] = self._storm_waiting.get(mid, 0) + 1
                else:
                    self._prompt(s, r.action_id, mid, now)
        elif r.kind == "approval":
            label = message.replace(blocks.esc(r.actor), who) if r.actor else message
            lines[mid].append(f":bust_in_silhouette: {label}")
            a = self.journal.get_action(r.action_id or "")
            if a is not None:  # the decision as audited (the action may have moved on since)
                state = "rejected" if r.message.startswith("rejected") else "approved"
                self.settle_prompt(s, a.id, state, who, r.at, a.playbook, a.target, now)
        elif r.kind == "transition":
            lines[mid].append(f":gear: `{blocks.esc(r.target)}`: {message}")
            if "-> expired" in r.message and r.action_id:
                a = self.journal.get_action(r.action_id)
                if a is not None:
                    self.settle_prompt(s, a.id, "expired", "", r.at, a.playbook, a.target, now)
        else:
            lines[mid].append(f"{r.kind}: {message}")

    def _prompt(self, s: Session, action_id: str, mid: str, now: float) -> None:
        if s.get(PromptRow, action_id) is not None:
            return
        a = self.journal.get_action(action_id)
        if a is None:
            return
        expires = now + self.cfg.slack.approval_ttl
        if a.deadline is not None:
            expires = min(expires, a.deadline)
        s.add(
            PromptRow(
                action_id=a.id,
                cluster=self.astore.cluster,
                message_id=mid,
                channel_id="",
                ts="",
                state="pending",
                created_at=now,
                expires_at=expires,
                decided_by="",
                decided_at=None,
            )
        )
        s.flush()
        self._prompts.append((mid, blocks.prompt_message(a, expires)))

    def settle_prompt(
        self,
        s: Session,
        action_id: str,
        state: str,
        by: str,
        at: float,
        playbook: str,
        target: str,
        now: float,
    ) -> bool:
        """Show a prompt's outcome once: a conditional update (pending -> state), so of two
        callers racing (a click and a cycle) exactly one enqueues the edit."""
        s.flush()
        res: Any = s.execute(
            update(PromptRow)
            .where(PromptRow.action_id == action_id, PromptRow.state == "pending")
            .values(state=state, decided_by=by, decided_at=at)
            .execution_options(synchronize_session=False)
        )
        if res.rowcount != 1:
            return False
        p = s.get(PromptRow, action_id, populate_existing=True)
        assert p is not None
        payload = blocks.decided_prompt(playbook, target, action_id, state, by, at)
        payload["prompt"] = action_id
        self.astore.enqueue(
            s,
            now,
            p.message_id,
            "prompt_update",
            message_id=p.message_id,
            severity="critical",
            payload=payload,
        )
        return True

    def expire_prompts(self, s: Session, now: float) -> None:
        q = select(PromptRow).where(
            PromptRow.cluster == self.astore.cluster,
            PromptRow.state == "pending",
            PromptRow.expires_at <= now,
        )
        for p in list(s.scalars(q)):
            a = self.journal.get_action(p.action_id)
            if a is not None:
                self.settle_prompt(
                    s, p.action_id, "expired", "", p.expires_at, a.playbook, a.target, now
                )
