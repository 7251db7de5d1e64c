"""Metering: the latest fleet state and GPU-hours over time, kept in gpufleet's database.

What the dashboard's fleet and utilization & cost pages and the daily report read, so that none
of them re-queries a month of Prometheus. Each call takes a `database.handle.Database` (the
journal's `Store` is one):

    meter = Meter(db, config)                     # once, on the leader
    meter.record_cycle(snapshot, now, findings)   # every live cycle
    fleet_state(db)                               # per GPU: health, allocation, utilization, owner
    usage(db, start, end, by="namespace")         # GPU-hours allocated / busy per 5-min rollups
    daily_report(db, end=now, config=config)      # written to the database
    daily_job(db, config, now=now, tz="UTC")      # the scheduler's daily job: report + prune
    prune(db, now, config)                        # bounded retention
"""

from metering.daily_report import (
    DailyReport,
    IncidentLine,
    NamespaceLine,
    daily_job,
    daily_report,
    last_midnight,
    reports,
    window_label,
)
from metering.gpu_columns import Health
from metering.meter import CycleRecord, Meter
from metering.metering_config import BUCKET_SECONDS, MeteringConfig, metering_config_from_section
from metering.queries import (
    ALL_CLUSTERS,
    GpuState,
    Totals,
    Usage,
    fleet_state,
    last_cycle,
    totals,
    usage,
)
from metering.retention import Pruned, prune

__all__ = [
    "ALL_CLUSTERS",
    "BUCKET_SECONDS",
    "CycleRecord",
    "DailyReport",
    "GpuState",
    "Health",
    "IncidentLine",
    "Meter",
    "MeteringConfig",
    "NamespaceLine",
    "Pruned",
    "Totals",
    "Usage",
    "daily_job",
    "daily_report",
    "fleet_state",
    "last_cycle",
    "last_midnight",
    "metering_config_from_section",
    "prune",
    "reports",
    "totals",
    "usage",
    "window_label",
]
