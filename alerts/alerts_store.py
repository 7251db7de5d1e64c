"""The alerts' tables: the outbox, messages and their incidents, approval prompts, the audit
cursor and seen signed requests. The same database as the journal, so an outgoing message is
committed before anything sends it and survives a restart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from database.handle import Database
from database.tables.alerts import (
    CursorRow,
    MemberRow,
    MessageRow,
    OutboxRow,
    PromptRow,
    SeenRequestRow,
)
from database.tables.journal import AuditRow

UNSENT = ("pending", "sending")


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One outbox row as the worker reads it."""

    id: int
    lane: str
    op: str
    message_id: str
    channel: str
    severity: str
    payload: Mapping[str, Any]
    state: str
    attempts: int
    next_at: float
    created_at: float


@dataclass(frozen=True, slots=True)
class Message:
    id: str
    group_key: str
    channel: str
    channel_id: str
    ts: str
    status: str


def _outgoing(r: OutboxRow) -> Outgoing:
    return Outgoing(
        r.id,
        r.lane,
        r.op,
        r.message_id,
        r.channel,
        r.severity,
        dict(r.payload),
        r.state,
        r.attempts,
        r.next_at,
        r.created_at,
    )


def _message(r: MessageRow) -> Message:
    return Message(r.id, r.group_key, r.channel, r.channel_id, r.ts, r.status)


class AlertsStore(Database):
    """One cluster's alerts tables (`AlertsStore.on(journal)`: the journal's database)."""

    # ---- outbox ------------------------------------------------------------------------------

    def enqueue(self, s: Session, now: float, lane: str, op: str, **fields: Any) -> None:
        """Add one row inside the caller's transaction. A `post` or `update` of a message that
        already has one waiting (unsent) replaces that row's content (one call, newest content)."""
        if op in ("post", "update") and fields.get("message_id"):
            waiting = s.scalars(
                select(OutboxRow).where(
                    OutboxRow.cluster == self.cluster,
                    OutboxRow.lane == lane,
                    OutboxRow.op == op,
                    OutboxRow.message_id == fields.get("message_id", ""),
                    OutboxRow.state == "pending",
                )
            ).first()
            if waiting is not None:
                waiting.payload = dict(fields.get("payload", {}))
                waiting.severity = fields.get("severity", waiting.severity)
                return
        s.add(
            OutboxRow(
                cluster=self.cluster,
                lane=lane,
                op=op,
                created_at=now,
                next_at=now,
                state="pending",
                attempts=0,
                last_error="",
                result={},
                message_id=fields.get("message_id", ""),
                channel=fields.get("channel", ""),
                severity=fields.get("severity", "info"),
                payload=dict(fields.get("payload", {})),
            )
        )

    def heads(self, now: float, limit: int = 100) -> list[Outgoing]:
        """The first unsent row of each lane, when due (later rows of a lane wait for it)."""
        first = (
            select(func.min(OutboxRow.id))
            .where(OutboxRow.cluster == self.cluster, OutboxRow.state.in_(UNSENT))
            .group_by(OutboxRow.lane)
        )
        q = (
            select(OutboxRow)
            .where(OutboxRow.id.in_(first), OutboxRow.next_at <= now)
            .order_by(OutboxRow.id)
            .limit(limit)
        )
        with Session(self.engine) as s:
            return [_outgoing(r) for r in s.scalars(q)]

    def claim(self, row: Outgoing, lease_until: float) -> bool:
        """`sending`, only if nobody else moved the row since it was read (two workers during
        a leader handover never both send it)."""
        with Session(self.engine) as s, s.begin():
            res: Any = s.execute(
                update(OutboxRow)
                .where(
                    OutboxRow.id == row.id,
                    OutboxRow.state == row.state,
                    OutboxRow.attempts == row.attempts,
                )
                .values(state="sending", attempts=row.attempts + 1, next_at=lease_until)
            )
            return bool(res.rowcount == 1)

    def mark(self, row_id: int, **values: Any) -> None:
        with Session(self.engine) as s, s.begin():
            s.execute(update(OutboxRow).where(OutboxRow.id == row_id).values(**values))

    def outbox(self, states: Sequence[str] | None = None) -> list[Outgoing]:
        q = select(OutboxRow).where(OutboxRow.cluster == self.cluster)
        if states:
            q = q.where(OutboxRow.state.in_(states))
        with Session(self.engine) as s:
            return [_outgoing(r) for r in s.scalars(q.order_by(OutboxRow.id))]

    def backlog(self, now: float) -> dict[str, float]:
        """For health and metrics: unsent rows, parked rows, the oldest unsent row's age."""
        with Session(self.engine) as s:
            unsent, oldest = s.execute(
                select(func.count(), func.min(OutboxRow.created_at)).where(
                    OutboxRow.cluster == self.cluster, OutboxRow.state.in_(UNSENT)
                )
            ).one()
            dead = s.scalar(
                select(func.count()).where(
                    OutboxRow.cluster == self.cluster, OutboxRow.state == "dead"
                )
            )
        return {
            "unsent": float(unsent or 0),
            "dead": float(dead or 0),
            "oldest_unsent_seconds": 0.0 if oldest is None else max(0.0, now - float(oldest)),
        }

    def sent_log(self, limit: int = 200) -> list[dict[str, Any]]:
        """Newest first, for the dashboard and the token-less demo."""
        q = (
            select(OutboxRow)
            .where(OutboxRow.cluster == self.cluster)
            .order_by(OutboxRow.id.desc())
            .limit(limit)
        )
        with Session(self.engine) as s:
            return [
                {
                    "id": r.id,
                    "op": r.op,
                    "state": r.state,
                    "channel": r.channel,
                    "text": r.payload.get("text", ""),
                    "sent_at": r.sent_at,
                    "error": r.last_error,
                }
                for r in s.scalars(q)
            ]

    # ---- messages ----------------------------------------------------------------------------

    def open_message(self, s: Session, group_key: str) -> MessageRow | None:
        return s.scalars(
            select(MessageRow).where(
                MessageRow.cluster == self.cluster,
                MessageRow.group_key == group_key,
                MessageRow.status == "open",
            )
        ).first()

    def open_messages(self, s: Session, group_keys: list[str]) -> dict[str, MessageRow]:
        out: dict[str, MessageRow] = {}
        for k in range(0, len(group_keys), 500):
            q = select(MessageRow).where(
                MessageRow.cluster == self.cluster,
                MessageRow.group_key.in_(group_keys[k : k + 500]),
                MessageRow.status == "open",
            )
            out.update({m.group_key: m for m in s.scalars(q)})
        return out

    def message(self, message_id: str) -> Message | None:
        with Session(self.engine) as s:
            row = s.get(MessageRow, message_id)
            return _message(row) if row is not None else None

    def messages(self) -> list[Message]:
        q = select(MessageRow).where(MessageRow.cluster == self.cluster).order_by(MessageRow.id)
        with Session(self.engine) as s:
            return [_message(r) for r in s.scalars(q)]

    def set_posted(self, message_id: str, channel_id: str, ts: str) -> None:
        with Session(self.engine) as s, s.begin():
            s.execute(
                update(MessageRow)
                .where(MessageRow.id == message_id)
                .values(channel_id=channel_id, ts=ts)
            )

    def members(self, s: Session, message_id: str) -> list[str]:
        q = select(MemberRow.incident_id).where(MemberRow.message_id == message_id)
        return list(s.scalars(q.order_by(MemberRow.incident_id)))

    def message_of(self, s: Session, incident_ids: Iterable[str]) -> dict[str, str]:
        ids = list(incident_ids)
        out: dict[str, str] = {}
        for i in range(0, len(ids), 500):
            q = select(MemberRow).where(MemberRow.incident_id.in_(ids[i : i + 500]))
            out.update({m.incident_id: m.message_id for m in s.scalars(q)})
        return out

    # ---- approval prompts --------------------------------------------------------------------

    def prompt(self, action_id: str) -> PromptRow | None:
        with Session(self.engine, expire_on_commit=False) as s:
            return s.get(PromptRow, action_id)

    def prompts(self, state: str | None = None) -> list[PromptRow]:
        q = select(PromptRow).where(PromptRow.cluster == self.cluster)
        if state:
            q = q.where(PromptRow.state == state)
        with Session(self.engine, expire_on_commit=False) as s:
            return list(s.scalars(q.order_by(PromptRow.created_at)))

    def set_prompt_posted(self, action_id: str, channel_id: str, ts: str) -> None:
        with Session(self.engine) as s, s.begin():
            s.execute(
                update(PromptRow)
                .where(PromptRow.action_id == action_id)
                .values(channel_id=channel_id, ts=ts)
            )

    # ---- audit cursor, seen requests ---------------------------------------------------------

    def cursor(self, s: Session) -> CursorRow:
        row = s.get(CursorRow, self.cluster, with_for_update=True)
        if row is None:
            row = CursorRow(cluster=self.cluster, audit_after=0)
            s.add(row)
        return row

    def start_cursor(self) -> None:
        """A first start on an existing journal begins at its newest audit row (history is
        not replayed into Slack); later starts resume where the last one stopped. Two replicas
        starting at once both find no cursor: the second insert loses, and the first's stands."""
        try:
            with Session(self.engine) as s, s.begin():
                if s.get(CursorRow, self.cluster) is not None:
                    return
                q = select(func.max(AuditRow.id)).where(AuditRow.cluster == self.cluster)
                s.add(CursorRow(cluster=self.cluster, audit_after=int(s.scalar(q) or 0)))
        except IntegrityError:
            if self._cursor_missing():
                raise  # not the other replica's cursor: a real error

    def _cursor_missing(self) -> bool:
        with Session(self.engine) as s:
            return s.get(CursorRow, self.cluster) is None

    def first_seen(self, digest: str, now: float, window: float) -> bool:
        """Record a signed request; False if it was seen before (a replay)."""
        try:
            with Session(self.engine) as s, s.begin():
                s.execute(delete(SeenRequestRow).where(SeenRequestRow.at < now - 2 * window))
                s.add(SeenRequestRow(digest=digest, at=now))
            return True
        except IntegrityError:
            return False
