"""After each cycle: incidents and journal events -> messages, thread lines and prompts, all
written to the outbox in one transaction (the worker sends them later).

Grouping: an incident joins the open message of its channel and node (or job, or the fleet);
when more new groups than `storm_threshold` appear in one channel in one cycle, they all join
one fleet-wide storm summary instead (and later ones too while it is open). A message closes
when all its incidents resolved. Journal events (decisions, approvals, transitions) are read
from the audit log after a stored cursor, so approvals made on the CLI or the dashboard show up
in the thread too, and nothing is missed across a restart.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from alerts import blocks
from alerts.alerts_config import AlertsConfig
from alerts.alerts_store import AlertsStore
from alerts.routing import route
from alerts.timeline import Timeline
from database.tables.alerts import MemberRow, MessageRow
from database.tables.journal import IncidentRow
from remediations.incidents import Change, IncidentChange
from remediations.store import IncidentRecord, Store
from remediations.store.convert import incident_record
from remediations.types import stable_id

log = logging.getLogger(__name__)


def _entity(i: IncidentRecord) -> str:
    return blocks.esc(i.gpu_uuid or i.node or i.job or "fleet")


class Notifier:
    def __init__(self, cfg: AlertsConfig, journal: Store, astore: AlertsStore) -> None:
        self.cfg = cfg
        self.journal = journal
        self.astore = astore
        self._loaded: dict[str, list[IncidentRecord]] = {}
        """Message id -> its incidents, read at most once per `on_cycle` (after grouping)."""
        self.timeline = Timeline(cfg, journal, astore, self._assign, self._enqueue)

    # ---- entry point -------------------------------------------------------------------------

    def on_cycle(self, changes: Sequence[IncidentChange], now: float) -> None:
        self._loaded.clear()
        with Session(self.astore.engine, expire_on_commit=False) as s, s.begin():
            lines: dict[str, list[str]] = defaultdict(list)
            touched: set[str] = set()
            created: set[str] = set()
            where = self.astore.message_of(s, [c.incident.id for c in changes])
            new = [
                c.incident
                for c in changes
                if c.incident.id not in where and c.change is not Change.RESOLVED
            ]
            self._assign(s, new, where, now, created)
            for c in changes:
                mid = where.get(c.incident.id)
                if mid is None:
                    continue
                i = c.incident
                if c.change is Change.OPENED:
                    lines[mid].append(
                        f":mag: {i.kind} on `{_entity(i)}` opened ({i.severity}): "
                        f"{blocks.esc(i.summary)}"
                    )
                elif c.change is Change.UPDATED:
                    lines[mid].append(
                        f":arrows_counterclockwise: {i.kind} on `{_entity(i)}` now {i.severity}: "
                        f"{blocks.esc(i.summary)}"
                    )
                elif c.change is Change.RESOLVED:
                    lines[mid].append(f":heavy_check_mark: {i.kind} on `{_entity(i)}` resolved")
                touched.add(mid)
            self.timeline.read(s, now, lines, created)
            self.timeline.expire_prompts(s, now)
            for mid in sorted(created | touched):
                self._render(s, mid, now, "post" if mid in created else "update")
            self.timeline.finish(s, now, lines)
            self._close_finished(s, touched, now)

    # ---- grouping ----------------------------------------------------------------------------

    def _group_key(self, i: IncidentRecord) -> tuple[str, str]:
        channel = route(self.cfg.slack, i.kind, i.severity)
        what = f"node:{i.node}" if i.node else f"job:{i.job}" if i.job else "fleet"
        return channel, f"{channel}|{what}"

    def _assign(
        self,
        s: Session,
        incidents: Iterable[IncidentRecord],
        where: dict[str, str],
        now: float,
        created: set[str],
    ) -> None:
        by_group: dict[str, list[IncidentRecord]] = defaultdict(list)
        channel_of: dict[str, str] = {}
        for i in incidents:
            channel, key = self._group_key(i)
            by_group[key].append(i)
            channel_of[key] = channel
        fresh: dict[str, list[str]] = defaultdict(list)
        target: dict[str, MessageRow] = self.astore.open_messages(s, list(by_group))
        for key in by_group:
            if key not in target:
                fresh[channel_of[key]].append(key)
        limit = self.cfg.slack.storm_threshold
        for channel, keys in fresh.items():
            storm_key = f"{channel}|storm"
            storm = self.astore.open_message(s, storm_key)
            if storm is None and len(keys) > limit:
                storm = self._new_message(s, storm_key, channel, now, created)
            for key in keys:
                target[key] = storm or self._new_message(s, key, channel, now, created)
        rows = []
        for key, members in by_group.items():
            mid = target[key].id
            self._loaded.pop(mid, None)
            for i in members:
                rows.append({"incident_id": i.id, "message_id": mid})
                where[i.id] = mid
        s.flush()
        if rows:
            s.execute(insert(MemberRow), rows)

    def _new_message(
        self, s: Session, key: str, channel: str, now: float, created: set[str]
    ) -> MessageRow:
        row = MessageRow(
            id="m" + stable_id(self.astore.cluster, key, now),
            cluster=self.astore.cluster,
            group_key=key,
            channel=channel,
            channel_id="",
            ts="",
            status="open",
            created_at=now,
            updated_at=now,
        )
        s.add(row)
        created.add(row.id)
        s.flush()
        # its place in the lane comes first; the content is filled in by `_render` at the end
        self.astore.enqueue(s, now, row.id, "post", message_id=row.id, channel=channel)
        return row

    def _members(self, s: Session, mid: str) -> list[IncidentRecord]:
        """The message's incidents as the journal has them now (read once per cycle)."""
        if mid in self._loaded:
            return self._loaded[mid]
        ids = self.astore.members(s, mid)
        out: list[IncidentRecord] = []
        for k in range(0, len(ids), 500):
            q = select(IncidentRow).where(IncidentRow.id.in_(ids[k : k + 500]))
            out += [incident_record(r) for r in s.scalars(q)]
        self._loaded[mid] = out
        return out

    def _render(self, s: Session, mid: str, now: float, op: str) -> None:
        msg = s.get(MessageRow, mid)
        assert msg is not None
        incidents = self._members(s, mid)
        dash = self.cfg.slack.dashboard_url
        cluster = self.astore.cluster
        what = msg.group_key.split("|", 1)[1]
        if what == "storm":
            payload = blocks.storm_message(incidents, cluster, dash)
        else:
            title = what.replace("node:", "node ").replace("job:", "job ")
            payload = blocks.group_message(title, incidents, cluster, dash)
        sev = blocks.worst([i.severity for i in incidents if i.status.value == "open"])
        msg.updated_at = now
        self._enqueue(s, now, mid, op, payload, channel=msg.channel, severity=sev)

    def _enqueue(
        self,
        s: Session,
        now: float,
        mid: str,
        op: str,
        payload: dict[str, Any],
        channel: str = "",
        severity: str = "",
    ) -> None:
        if not severity:
            incidents = self._members(s, mid)
            open_sev = [i.severity for i in incidents if i.status.value == "open"]
            severity = blocks.worst(open_sev or [i.severity for i in incidents])
        self.astore.enqueue(
            s, now, mid, op, message_id=mid, channel=channel, severity=severity, payload=payload
        )

    def _close_finished(self, s: Session, mids: Iterable[str], now: float) -> None:
        for mid in mids:
            msg = s.get(MessageRow, mid)
            if msg is None or msg.status != "open":
                continue
            if all(i.status.value == "resolved" for i in self._members(s, mid)):
                msg.status, msg.updated_at = "closed", now
