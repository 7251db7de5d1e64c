"""Metering's tables in the journal database (created by migration 0002_metering).

- `metering_gpu_state`: the latest fleet state, one row per GPU or MIG instance (replaced every
  cycle).
- `metering_cursor`: per cluster, when the last cycle was recorded (so a new leader continues
  the accounting where the old one stopped, without a gap or a double count).
- `metering_usage`: GPU-seconds per 5-minute bucket, per dimension (fleet, node, pool,
  namespace, job, team), key and GPU model: all GPUs, allocated, busy (utilization-weighted)
  and allocated without a utilization sample. Seconds, not hours: sums stay exact; queries convert.
- `metering_usage_hourly`: the same in 1-hour buckets, written in the same transaction, so long
  windows read hours and only their ragged ends read 5-minute buckets.
- `metering_reports`: one daily report per cluster and window end, as JSON.

`tests/database/test_schema_matches_tables.py` checks that the migrated schema and these tables
agree.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
)

from database.tables.metadata import METADATA

gpu_state = Table(
    "metering_gpu_state",
    METADATA,
    Column("cluster", String(128), nullable=False),
    Column("uuid", String(128), nullable=False),
    Column("mig_instance", String(16), nullable=False),
    Column("taken_at", Float, nullable=False),
    Column("node", String(253), nullable=False),
    Column("pool", String(253), nullable=False),
    Column("device", Integer, nullable=False),
    Column("model", String(128), nullable=False),
    Column("mig_profile", String(32), nullable=False),
    Column("health", String(16), nullable=False),
    Column("issue", String(32), nullable=False),
    Column("allocated", Boolean, nullable=False),
    Column("utilization", Float, nullable=True),
    Column("namespace", String(253), nullable=False),
    Column("pod", String(253), nullable=False),
    Column("job", String(320), nullable=False),
    Column("team", String(253), nullable=False),
    PrimaryKeyConstraint("cluster", "uuid", "mig_instance", name="pk_metering_gpu_state"),
)

cursor = Table(
    "metering_cursor",
    METADATA,
    Column("cluster", String(128), primary_key=True),
    Column("taken_at", Float, nullable=False),
    Column("gpus", Integer, nullable=False),
)


def _usage_table(name: str) -> Table:
    return Table(
        name,
        METADATA,
        Column("cluster", String(128), nullable=False),
        Column("dimension", String(16), nullable=False),
        Column("bucket", Integer, nullable=False),
        Column("key", String(320), nullable=False),
        Column("model", String(128), nullable=False),
        Column("gpu_seconds", Float, nullable=False),
        Column("allocated_seconds", Float, nullable=False),
        Column("busy_seconds", Float, nullable=False),
        Column("unmeasured_seconds", Float, nullable=False),
        PrimaryKeyConstraint("cluster", "dimension", "bucket", "key", "model", name=f"pk_{name}"),
        Index(f"ix_{name}_bucket", "bucket"),
    )


usage = _usage_table("metering_usage")
"""5-minute buckets."""
usage_hourly = _usage_table("metering_usage_hourly")
"""The same sums in 1-hour buckets: a month of per-job usage is 720 buckets, not 8,640."""

reports = Table(
    "metering_reports",
    METADATA,
    Column("cluster", String(128), nullable=False),
    Column("end", Integer, nullable=False),
    Column("start", Integer, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("body", JSON, nullable=False),
    PrimaryKeyConstraint("cluster", "end", name="pk_metering_reports"),
)
