"""What the dashboard and the reports read: the latest fleet state and usage over a window.

Every reader takes the database handle and, optionally, `cluster`: None reads the handle's cluster,
`ALL_CLUSTERS` reads every cluster sharing the database (rows say which cluster they are from).
Usage windows are cut on 5-minute bucket boundaries: `start` is rounded down and `end` up. Past
`retention_days` only hourly rollups are left: read such windows in whole hours.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import ColumnElement, Table, func, select

from database.handle import Database
from database.tables import metering as t
from metering.metering_config import BUCKET_SECONDS, HOUR_SECONDS, MeteringConfig
from metering.rollup import DIMENSIONS

ALL_CLUSTERS = "*"
HOUR = 3600.0
Dimension = Literal["fleet", "node", "pool", "namespace", "job", "team"]


@dataclass(frozen=True, slots=True)
class GpuState:
    cluster: str
    uuid: str
    mig_instance: str
    """"" for a whole GPU."""
    taken_at: float
    node: str
    pool: str
    device: int
    model: str
    mig_profile: str
    health: str
    issue: str
    allocated: bool
    utilization: float | None
    namespace: str
    pod: str
    job: str
    team: str


@dataclass(frozen=True, slots=True)
class Usage:
    """GPU-hours of one key (and GPU model; and bucket when asked per bucket) over a window."""

    cluster: str
    dimension: str
    key: str
    model: str
    bucket: int | None
    gpu_hours: float
    allocated_gpu_hours: float
    busy_gpu_hours: float
    unmeasured_gpu_hours: float

    @property
    def idle_gpu_hours(self) -> float:
        """Allocated and measured, but not busy (unmeasured hours are not called idle)."""
        return max(0.0, self.allocated_gpu_hours - self.busy_gpu_hours - self.unmeasured_gpu_hours)


def cluster_filter(
    db: Database, cluster: str | None, col: ColumnElement[str]
) -> list[ColumnElement[bool]]:
    if cluster == ALL_CLUSTERS:
        return []
    return [col == (db.cluster if cluster is None else cluster)]


def fleet_state(db: Database, cluster: str | None = None) -> list[GpuState]:
    """The latest recorded state of every GPU, by cluster, node and device."""
    g = t.gpu_state.c
    q = (
        select(t.gpu_state)
        .where(*cluster_filter(db, cluster, g.cluster))
        .order_by(g.cluster, g.node, g.device, g.uuid, g.mig_instance)
    )
    with db.connect() as conn:
        return [GpuState(**dict(r._mapping)) for r in conn.execute(q)]


def last_cycle(db: Database, cluster: str | None = None) -> float | None:
    """When the newest cycle was recorded (the newest over all clusters for ALL_CLUSTERS)."""
    q = select(func.max(t.cursor.c.taken_at)).where(
        *cluster_filter(db, cluster, t.cursor.c.cluster)
    )
    with db.connect() as conn:
        value = conn.execute(q).scalar_one_or_none()
    return None if value is None else float(value)


def window_buckets(start: float, end: float, size: int = BUCKET_SECONDS) -> tuple[int, int]:
    """[first bucket, end bucket) of `size`-second buckets covering [start, end)."""
    lo = math.floor(start / size) * size
    hi = math.ceil(end / size) * size
    return int(lo), int(hi)


def _segments(lo: int, hi: int) -> list[tuple[Table, int, int]]:
    """[lo, hi) (5-minute aligned) as whole hours from the hourly table and the ragged ends
    from the 5-minute table."""
    h_lo = math.ceil(lo / HOUR_SECONDS) * HOUR_SECONDS
    h_hi = math.floor(hi / HOUR_SECONDS) * HOUR_SECONDS
    if h_lo >= h_hi:
        return [(t.usage, lo, hi)]
    parts = [(t.usage, lo, h_lo), (t.usage_hourly, h_lo, h_hi), (t.usage, h_hi, hi)]
    return [(table, a, b) for table, a, b in parts if a < b]


def _usage_query(
    db: Database,
    table: Table,
    lo: int,
    hi: int,
    by: str,
    cluster: str | None,
    per_bucket: bool,
) -> Any:
    u = table.c
    groups: list[ColumnElement[object]] = [u.cluster, u.key, u.model]
    if per_bucket:
        groups.append(u.bucket)
    sums = (
        func.sum(u.gpu_seconds),
        func.sum(u.allocated_seconds),
        func.sum(u.busy_seconds),
        func.sum(u.unmeasured_seconds),
    )
    return (
        select(*groups, *sums)
        .where(
            *cluster_filter(db, cluster, u.cluster),
            u.dimension == by,
            u.bucket >= lo,
            u.bucket < hi,
        )
        .group_by(*groups)
    )


def usage(
    db: Database,
    start: float,
    end: float,
    by: Dimension = "namespace",
    *,
    cluster: str | None = None,
    per_bucket: bool = False,
    resolution: int = BUCKET_SECONDS,
) -> list[Usage]:
    """GPU-hours per key and GPU model over [start, end), sorted by cluster, key, model.

    `per_bucket`: one row per bucket of `resolution` seconds (300 or 3600) instead, for a
    time series. Without it, whole hours of the window are read from the hourly rollup and
    only the ragged ends from the 5-minute one (the same sums, far fewer rows).
    """
    if by not in DIMENSIONS:
        raise ValueError(f"by: expected one of {', '.join(DIMENSIONS)} (got {by!r})")
    if resolution not in (BUCKET_SECONDS, HOUR_SECONDS):
        raise ValueError(f"resolution: expected {BUCKET_SECONDS} or {HOUR_SECONDS} seconds")
    if per_bucket:
        lo, hi = window_buckets(start, end, resolution)
        table = t.usage if resolution == BUCKET_SECONDS else t.usage_hourly
        parts = [(table, lo, hi)]
    else:
        parts = _segments(*window_buckets(start, end))
    queries = [_usage_query(db, tbl, lo, hi, by, cluster, per_bucket) for tbl, lo, hi in parts]
    with db.connect() as conn:
        if len(queries) == 1:  # one table: the database sums and sorts
            (q,) = queries
            rows: list[Any] = list(conn.execute(q.order_by(*q.selected_columns[:-4])))
        else:  # whole hours and ragged ends: add the parts' sums per key
            acc: dict[tuple[Any, ...], list[float]] = {}
            for q in queries:
                for part in conn.execute(q):
                    sums = acc.setdefault(tuple(part[:-4]), [0.0, 0.0, 0.0, 0.0])
                    for i, x in enumerate(part[-4:]):
                        sums[i] += float(x)
            rows = [(*k, *v) for k, v in sorted(acc.items(), key=lambda kv: kv[0])]
    out: list[Usage] = []
    for r in rows:
        *head, g, a, b, m = r
        bucket = int(head[3]) if per_bucket else None
        out.append(
            Usage(head[0], by, head[1], head[2], bucket, g / HOUR, a / HOUR, b / HOUR, m / HOUR)
        )
    return out


@dataclass(frozen=True, slots=True)
class Totals:
    """Usage summed over keys and models, with the idle money where prices are known."""

    gpu_hours: float
    allocated_gpu_hours: float
    busy_gpu_hours: float
    unmeasured_gpu_hours: float
    idle_gpu_hours: float
    idle_cost: float
    unpriced_idle_gpu_hours: float
    """Idle hours of GPU models without a price (not in `idle_cost`)."""


def totals(rows: Iterable[Usage], config: MeteringConfig) -> Totals:
    g = a = b = m = idle = cost = unpriced = 0.0
    for r in rows:
        g += r.gpu_hours
        a += r.allocated_gpu_hours
        b += r.busy_gpu_hours
        m += r.unmeasured_gpu_hours
        idle += r.idle_gpu_hours
        price = config.price_for(r.model)
        if price is None:
            unpriced += r.idle_gpu_hours
        else:
            cost += r.idle_gpu_hours * price
    return Totals(g, a, b, m, idle, cost, unpriced)
