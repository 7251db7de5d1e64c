"""The outbox worker: sends what `notify` stored, in order per message, exactly once.

Every pass takes the first unsent row of each lane (a message and its thread), so rows of one
incident's message go strictly in order while lanes do not wait for each other. Before a call
the row is marked `sending` (committed); after it, `sent` with Slack's answer. A row found
`sending` (the process died mid-call, or the answer was lost) is looked up in the channel's
history by the outbox id carried in the message's metadata before it is sent again, so a lost
answer never turns into a duplicate post. 429s wait for Retry-After (slack-sdk already retried
once in place), 5xx and outages back off exponentially, setup refusals (token, scope, channel)
are kept and retried every 5 minutes, and a refusal of the message itself parks the row as `dead`
(logged) so one bad message cannot block its lane forever.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from alerts.alerts_config import SlackConfig
from alerts.alerts_store import AlertsStore, Outgoing
from alerts.blocks import RANK
from alerts.routing import RateBudget, quiet_until
from errors import PermanentError, TemporaryError

log = logging.getLogger(__name__)
LOG_ONLY = logging.getLogger("alerts.slack.log_only")
"""Messages that would have gone to Slack (no token): their own logger, so a deployment (or the
demo, which writes them to slack.log) can keep them apart from the service's story."""
EVENT_TYPE = "gpufleet_outbox"
BACKOFF_MAX = 300.0
LEASE = 120.0
"""A claimed row is left alone by other workers this long (then taken as possibly sent)."""


class Transport(Protocol):
    def call(self, method: str, payload: Mapping[str, Any]) -> dict[str, Any]: ...


class LogTransport:
    """No Slack token (the demo): each message is logged and kept in the store."""

    def __init__(self) -> None:
        self._n = itertools.count(1)

    def call(self, method: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        if method.startswith("conversations."):
            return {"ok": True, "messages": []}
        n = next(self._n)
        LOG_ONLY.info("%s %s: %s", method, payload.get("channel", ""), payload["text"])
        return {"ok": True, "channel": str(payload.get("channel", "log")), "ts": f"0.{n:06d}"}


def backoff(attempts: int) -> float:
    return min(BACKOFF_MAX, 2.0 ** max(1, attempts))


def _is_id(channel: str) -> bool:
    return channel[:1] in ("C", "G", "D") and channel[1:].isalnum() and channel.isupper()


class OutboxWorker:
    def __init__(self, astore: AlertsStore, transport: Transport, cfg: SlackConfig) -> None:
        self.astore = astore
        self.transport = transport
        self.cfg = cfg
        self.budget = RateBudget(cfg.rate_per_minute)

    def run(self, now: float, max_calls: int = 100) -> int:
        """One pass; returns how many rows were sent."""
        sent = calls = 0
        while calls < max_calls:
            progressed = False
            for row in self.astore.heads(now):
                if calls >= max_calls:
                    break
                held = quiet_until(self.cfg.quiet_hours, row.severity, now)
                if held is not None and row.op in ("post", "reply"):
                    self.astore.mark(row.id, next_at=held, last_error="held: quiet hours")
                    continue
                channel = self._channel_key(row)
                if row.op != "ephemeral" and not self.budget.take(channel, now):
                    continue  # over this channel's budget: next pass
                calls += 1
                outcome = self._send(row, now)
                sent += outcome == "sent"
                progressed = progressed or outcome != "retry"
            if not progressed:
                break
        return sent

    def _channel_key(self, row: Outgoing) -> str:
        if row.channel:
            return row.channel
        msg = self.astore.message(row.message_id)
        return msg.channel if msg else ""

    # ---- one row -----------------------------------------------------------------------------

    def _send(self, row: Outgoing, now: float) -> str:
        """`sent`, `dead` (refused for good) or `retry` (later)."""
        try:
            if row.state == "sending" and self._recover(row, now):
                return "sent"
            method, payload = self._request(row)
        except PermanentError as exc:
            self._dead(row, str(exc))
            return "dead"
        except TemporaryError as exc:
            self._retry(row, now, exc)
            return "retry"
        if not self.astore.claim(row, now + LEASE):
            return "retry"  # another worker has it
        try:
            answer = self.transport.call(method, payload)
        except TemporaryError as exc:
            self._retry(row, now, exc, attempts=row.attempts + 1)
            return "retry"
        except PermanentError as exc:
            self._dead(row, str(exc))
            return "dead"
        self._done(row, answer, now)
        return "sent"

    def _request(self, row: Outgoing) -> tuple[str, dict[str, Any]]:
        p = {k: v for k, v in row.payload.items() if k in ("text", "blocks")}
        meta = {"event_type": EVENT_TYPE, "event_payload": {"outbox_id": row.id}}
        if row.op == "post":
            return "chat.postMessage", {**p, "channel": row.channel, "metadata": meta}
        if row.op == "ephemeral":
            return "chat.postEphemeral", {
                **p,
                "channel": row.channel,
                "user": row.payload["user"],
            }
        if row.op == "prompt_update":
            prompt = self.astore.prompt(str(row.payload.get("prompt", "")))
            if prompt is None or not prompt.ts:
                raise PermanentError("the approval prompt was never posted")
            return "chat.update", {**p, "channel": prompt.channel_id, "ts": prompt.ts}
        msg = self.astore.message(row.message_id)
        if msg is None or not msg.ts:
            raise PermanentError("its message was never posted (see the lane's dead rows)")
        if row.op == "update":
            return "chat.update", {**p, "channel": msg.channel_id, "ts": msg.ts}
        # reply, prompt: in the message's thread
        return "chat.postMessage", {
            **p,
            "channel": msg.channel_id,
            "thread_ts": msg.ts,
            "metadata": meta,
        }

    def _done(self, row: Outgoing, answer: Mapping[str, Any], now: float) -> None:
        channel_id, ts = str(answer.get("channel", "")), str(answer.get("ts", ""))
        if row.op == "post" and row.message_id:
            self.astore.set_posted(row.message_id, channel_id, ts)
        elif row.op == "prompt":
            self.astore.set_prompt_posted(self._prompt_id(row), channel_id, ts)
        self.astore.mark(
            row.id,
            state="sent",
            sent_at=now,
            last_error="",
            result={"channel": channel_id, "ts": ts},
        )

    @staticmethod
    def _prompt_id(row: Outgoing) -> str:
        for b in row.payload.get("blocks", []):
            if b.get("type") == "actions":
                return str(b["block_id"]).split(":", 1)[1]
        return ""

    def _retry(
        self, row: Outgoing, now: float, exc: TemporaryError, attempts: int | None = None
    ) -> None:
        n = row.attempts if attempts is None else attempts
        delay = exc.delay if exc.delay > 0 else backoff(n)
        ambiguous = bool(getattr(exc, "ambiguous", False))
        log.warning("slack outbox row %s (%s): %s; again in %.0f s", row.id, row.op, exc, delay)
        self.astore.mark(
            row.id,
            state="sending" if ambiguous else "pending",
            attempts=n,
            next_at=now + delay,
            last_error=str(exc)[:1000],
        )

    def _dead(self, row: Outgoing, why: str) -> None:
        log.error("slack outbox row %s (%s) refused for good: %s", row.id, row.op, why)
        self.astore.mark(row.id, state="dead", last_error=why[:1000])

    # ---- a row whose earlier attempt may have reached Slack ------------------------------------

    def _recover(self, row: Outgoing, now: float) -> bool:
        """Find a `sending` post/reply/prompt in Slack by its outbox id; True if it is there."""
        if row.op not in ("post", "reply", "prompt"):
            return False  # updates and ephemerals are safe to repeat
        if row.op == "post":
            if not _is_id(row.channel):
                log.warning("outbox row %s: cannot look up channel name %s", row.id, row.channel)
                return False
            method = "conversations.history"
            args: dict[str, Any] = {"channel": row.channel}
        else:
            msg = self.astore.message(row.message_id)
            if msg is None or not msg.ts:
                return False
            method, args = "conversations.replies", {"channel": msg.channel_id, "ts": msg.ts}
        args.update(oldest=f"{row.created_at - 60:.6f}", include_all_metadata=True, limit=200)
        try:
            answer = self.transport.call(method, args)
        except PermanentError as exc:  # e.g. missing channels:history scope: send again
            log.warning("outbox row %s: cannot look it up (%s); sending again", row.id, exc)
            return False
        for m in answer.get("messages", []):
            payload = (m.get("metadata") or {}).get("event_payload") or {}
            if payload.get("outbox_id") == row.id:
                channel = str(answer.get("channel") or args["channel"])
                self._done(row, {"channel": channel, "ts": m.get("ts", "")}, now)
                log.info("outbox row %s was already in Slack (ts %s)", row.id, m.get("ts"))
                return True
        return False


__all__ = ["RANK", "LogTransport", "OutboxWorker", "Transport", "backoff"]
