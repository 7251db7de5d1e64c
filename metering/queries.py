"""What the dashboard and the reports read: the latest fleet state and usage over a window.

Every reader takes the store and, optionally, `cluster`: None reads the store's cluster,
`ALL_CLUSTERS` reads every cluster sharing the database (rows say which cluster they are from).
Usage windows are cut on 5-minute bucket boundaries: `start` is rounded down and `end` up.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import ColumnElement, func, select

from metering import tables as t
from metering.config import BUCKET_SECONDS, MeteringConfig
from metering.rollup import DIMENSIONS
from remediations.store import Store

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


def _cluster_filter(
    store: Store, cluster: str | None, col: ColumnElement[str]
) -> list[ColumnElement[bool]]:
    if cluster == ALL_CLUSTERS:
        return []
    return [col == (store.cluster if cluster is None else cluster)]


def fleet_state(store: Store, cluster: str | None = None) -> list[GpuState]:
    """The latest recorded state of every GPU, by cluster, node and device."""
    g = t.gpu_state.c
    q = (
        select(t.gpu_state)
        .where(*_cluster_filter(store, cluster, g.cluster))
        .order_by(g.cluster, g.node, g.device, g.uuid, g.mig_instance)
    )
    with store.engine.connect() as conn:
        return [GpuState(**dict(r._mapping)) for r in conn.execute(q)]


def last_cycle(store: Store, cluster: str | None = None) -> float | None:
    """When the newest cycle was recorded (the newest over all clusters for ALL_CLUSTERS)."""
    q = select(func.max(t.cursor.c.taken_at)).where(
        *_cluster_filter(store, cluster, t.cursor.c.cluster)
    )
    with store.engine.connect() as conn:
        value = conn.execute(q).scalar_one_or_none()
    return None if value is None else float(value)


def window_buckets(start: float, end: float) -> tuple[int, int]:
    """[first bucket, end bucket) covering [start, end)."""
    lo = math.floor(start / BUCKET_SECONDS) * BUCKET_SECONDS
    hi = math.ceil(end / BUCKET_SECONDS) * BUCKET_SECONDS
    return int(lo), int(hi)


def _usage_query(
    store: Store, start: float, end: float, by: str, cluster: str | None, per_bucket: bool
) -> Any:
    if by not in DIMENSIONS:
        raise ValueError(f"by: expected one of {', '.join(DIMENSIONS)} (got {by!r})")
    u = t.usage.c
    lo, hi = window_buckets(start, end)
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
            *_cluster_filter(store, cluster, u.cluster),
            u.dimension == by,
            u.bucket >= lo,
            u.bucket < hi,
        )
        .group_by(*groups)
        .order_by(*groups)
    )


def usage(
    store: Store,
    start: float,
    end: float,
    by: Dimension = "namespace",
    *,
    cluster: str | None = None,
    per_bucket: bool = False,
) -> list[Usage]:
    """GPU-hours per key and GPU model over [start, end) (per 5-minute bucket if asked)."""
    q = _usage_query(store, start, end, by, cluster, per_bucket)
    out: list[Usage] = []
    with store.engine.connect() as conn:
        for r in conn.execute(q):
            bucket = int(r[3]) if per_bucket else None
            g, a, b, m = (float(x) / HOUR for x in tuple(r)[-4:])
            out.append(Usage(str(r[0]), by, str(r[1]), str(r[2]), bucket, g, a, b, m))
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
