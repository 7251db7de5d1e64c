"""The daily report: GPU-hours allocated vs busy by namespace, idle waste in GPU-hours and money,
and the incidents and actions of the day; written to the database for Slack and the dashboard.

`daily_report(db, end=...)` covers [end - 24 h, end) and replaces any report of the same
cluster and end (running the job twice writes one report). Numbers come from the same rollups
the dashboard reads, so the two always agree.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite

from database.handle import Database
from database.tables import metering as t
from database.tables.journal import ActionRow, IncidentRow
from metering.metering_config import BUCKET_SECONDS, MeteringConfig
from metering.queries import Totals, cluster_filter, totals, usage, window_buckets
from metering.retention import prune

DAY = 86400.0
MAX_LISTED_INCIDENTS = 50


@dataclass(frozen=True, slots=True)
class NamespaceLine:
    namespace: str
    allocated_gpu_hours: float
    busy_gpu_hours: float
    unmeasured_gpu_hours: float
    idle_gpu_hours: float
    idle_cost: float

    @property
    def busy_percent(self) -> float:
        a = self.allocated_gpu_hours
        return 100.0 * self.busy_gpu_hours / a if a > 0 else 0.0


@dataclass(frozen=True, slots=True)
class IncidentLine:
    id: str
    kind: str
    severity: str
    status: str
    node: str | None
    job: str | None
    summary: str
    opened_at: float


@dataclass(frozen=True, slots=True)
class DailyReport:
    cluster: str
    start: int
    end: int
    created_at: float
    currency: str
    namespaces: tuple[NamespaceLine, ...]
    totals: Totals
    incidents_opened: int
    incidents_by_kind: dict[str, int] = field(default_factory=dict)
    incidents: tuple[IncidentLine, ...] = ()
    """The day's incidents, worst first (at most MAX_LISTED_INCIDENTS)."""
    actions_by_playbook: dict[str, dict[str, int]] = field(default_factory=dict)
    """playbook -> state -> count, for actions created in the window."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> DailyReport:
        return cls(
            cluster=d["cluster"],
            start=int(d["start"]),
            end=int(d["end"]),
            created_at=float(d["created_at"]),
            currency=d["currency"],
            namespaces=tuple(NamespaceLine(**x) for x in d["namespaces"]),
            totals=Totals(**d["totals"]),
            incidents_opened=int(d["incidents_opened"]),
            incidents_by_kind=dict(d["incidents_by_kind"]),
            incidents=tuple(IncidentLine(**x) for x in d["incidents"]),
            actions_by_playbook={k: dict(v) for k, v in d["actions_by_playbook"].items()},
        )


def _namespaces(db: Database, start: float, end: float, cfg: MeteringConfig) -> list[NamespaceLine]:
    rows = usage(db, start, end, by="namespace")
    by_ns: dict[str, list[Any]] = {}
    for r in rows:
        by_ns.setdefault(r.key, []).append(r)
    lines = []
    for ns, group in by_ns.items():
        tot = totals(group, cfg)
        lines.append(
            NamespaceLine(
                ns,
                tot.allocated_gpu_hours,
                tot.busy_gpu_hours,
                tot.unmeasured_gpu_hours,
                tot.idle_gpu_hours,
                tot.idle_cost,
            )
        )
    lines.sort(key=lambda x: (-x.idle_gpu_hours, x.namespace))
    return lines


def _incidents(db: Database, start: float, end: float) -> list[IncidentLine]:
    r = IncidentRow
    q = select(r.id, r.kind, r.severity, r.status, r.node, r.job, r.summary, r.opened_at).where(
        r.cluster == db.cluster, r.opened_at >= start, r.opened_at < end
    )
    with db.connect() as conn:
        lines = [IncidentLine(*row) for row in conn.execute(q)]
    rank = {"critical": 0, "warning": 1, "info": 2}
    lines.sort(key=lambda x: (rank.get(x.severity, 3), x.opened_at, x.id))
    return lines


def _actions(db: Database, start: float, end: float) -> list[tuple[str, str]]:
    """(playbook, state) of each action created in [start, end) and updated since `start` (what
    the journal's `actions(since=start)` lists), oldest first."""
    a = ActionRow
    q = select(a.playbook, a.state).where(
        a.cluster == db.cluster, a.created_at >= start, a.created_at < end, a.updated_at >= start
    )
    with db.connect() as conn:
        return [(p, st) for p, st in conn.execute(q.order_by(a.created_at, a.id))]


def daily_report(
    db: Database,
    *,
    end: float,
    config: MeteringConfig | None = None,
    now: float | None = None,
    save: bool = True,
) -> DailyReport:
    """The report of [end - 24 h, end), written to `metering_reports` unless `save=False`."""
    cfg = config or MeteringConfig()
    lo, hi = window_buckets(end - DAY, end)
    incidents = _incidents(db, lo, hi)
    by_playbook: dict[str, Counter[str]] = {}
    for playbook, state in _actions(db, lo, hi):
        by_playbook.setdefault(playbook, Counter())[state] += 1
    report = DailyReport(
        cluster=db.cluster,
        start=lo,
        end=hi,
        created_at=time.time() if now is None else now,
        currency=cfg.currency,
        namespaces=tuple(_namespaces(db, lo, hi, cfg)),
        totals=totals(usage(db, lo, hi, by="fleet"), cfg),
        incidents_opened=len(incidents),
        incidents_by_kind=dict(Counter(i.kind for i in incidents)),
        incidents=tuple(incidents[:MAX_LISTED_INCIDENTS]),
        actions_by_playbook={k: dict(v) for k, v in sorted(by_playbook.items())},
    )
    if save:
        save_report(db, report)
    return report


def save_report(db: Database, report: DailyReport) -> None:
    mod: Any = postgresql if db.dialect == "postgresql" else sqlite
    stmt = mod.insert(t.reports).values(
        cluster=report.cluster,
        end=report.end,
        start=report.start,
        created_at=report.created_at,
        body=report.to_json(),
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=["cluster", "end"],
        set_={c: stmt.excluded[c] for c in ("start", "created_at", "body")},
    )
    with db.begin() as conn:
        conn.execute(stmt)


def reports(
    db: Database, since: float | None = None, cluster: str | None = None
) -> list[DailyReport]:
    """Saved reports (newest first) of the handle's cluster, of `cluster`, or of every cluster
    (`ALL_CLUSTERS`)."""
    c = t.reports.c
    q = select(c.body).where(*cluster_filter(db, cluster, c.cluster))
    if since is not None:
        q = q.where(c.end > since)
    with db.connect() as conn:
        return [DailyReport.from_json(b) for (b,) in conn.execute(q.order_by(c.end.desc()))]


def last_midnight(now: float, tz: str = "UTC") -> float:
    """The most recent midnight in `tz` at or before `now` (unix seconds)."""
    local = datetime.fromtimestamp(now, ZoneInfo(tz))
    return local.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()


def daily_job(
    db: Database,
    config: MeteringConfig | None = None,
    *,
    now: float,
    tz: str = "UTC",
    last_24h: bool = False,
) -> DailyReport:
    """The scheduled daily job in one call: the report of the day that ended at the last
    midnight in `tz` (or, `last_24h`, of the 24 hours up to `now`), written to the database, then
    `prune`. Running it twice on the same day rewrites the same report."""
    end = now - now % BUCKET_SECONDS if last_24h else last_midnight(now, tz)
    report = daily_report(db, end=end, config=config, now=now)
    prune(db, now, config)
    return report


def window_label(report: DailyReport, tz: str = "UTC") -> str:
    """The window a report covers, as a person reads it: `2026-12-02 00:00 to 2026-12-03 00:00
    UTC`."""
    zone = ZoneInfo(tz)

    def at(t: float) -> str:
        return datetime.fromtimestamp(t, zone).strftime("%Y-%m-%d %H:%M")

    return f"{at(report.start)} to {at(report.end)} {tz}"
