"""Bounded retention: rollups and reports older than the configured days are deleted.

Run it once in a while (the service's scheduler, or after the daily report); it only deletes
by bucket or report end, through the indexes those columns have.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete

from database.handle import Database
from database.tables import metering as t
from metering.metering_config import BUCKET_SECONDS, HOUR_SECONDS, MeteringConfig

DAY = 86400.0


@dataclass(frozen=True, slots=True)
class Pruned:
    usage_rows: int
    hourly_rows: int
    reports: int


def prune(db: Database, now: float, config: MeteringConfig | None = None) -> Pruned:
    """Delete this cluster's 5-minute buckets that ended before `now - retention_days`, hourly
    buckets that ended before `now - hourly_retention_days` and reports that ended before
    `now - report_retention_days`."""
    cfg = config or MeteringConfig()
    usage_cutoff = now - cfg.retention_days * DAY - BUCKET_SECONDS
    hourly_cutoff = now - cfg.hourly_retention_days * DAY - HOUR_SECONDS
    report_cutoff = now - cfg.report_retention_days * DAY
    with db.begin() as conn:
        u = conn.execute(
            delete(t.usage).where(t.usage.c.cluster == db.cluster, t.usage.c.bucket < usage_cutoff)
        ).rowcount
        h = conn.execute(
            delete(t.usage_hourly).where(
                t.usage_hourly.c.cluster == db.cluster, t.usage_hourly.c.bucket < hourly_cutoff
            )
        ).rowcount
        r = conn.execute(
            delete(t.reports).where(
                t.reports.c.cluster == db.cluster, t.reports.c.end < report_cutoff
            )
        ).rowcount
    return Pruned(int(u or 0), int(h or 0), int(r or 0))
