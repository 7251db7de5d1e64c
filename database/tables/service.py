"""The service's tables (migrations 0004_service and 0005_cluster_identity).

- `service_job_runs`: per cluster and scheduled job, the last fire claimed and how it ended
  (`gpufleet.service.job_runs` claims fires here exactly once).
- `cluster_identity`: which Kubernetes cluster (its kube-system UID) a `cluster` name belongs to
  (`gpufleet.service.cluster_claim`).
"""

from __future__ import annotations

from sqlalchemy import Boolean, Column, Float, Integer, String, Table, Text

from database.tables.metadata import METADATA

JOB_RUNS = Table(
    "service_job_runs",
    METADATA,
    Column("cluster", String(128), primary_key=True),
    Column("job", String(63), primary_key=True),
    Column("kind", String(64), nullable=False),
    Column("last_fire", Float, nullable=False),
    Column("last_started", Float, nullable=True),
    Column("last_finished", Float, nullable=True),
    Column("last_ok", Boolean, nullable=True),
    Column("last_outcome", Text, nullable=False, server_default=""),
    Column("last_owner", String(253), nullable=False, server_default=""),
    Column("runs", Integer, nullable=False, server_default="0"),
    Column("misses", Integer, nullable=False, server_default="0"),
)

CLUSTER_IDENTITY = Table(
    "cluster_identity",
    METADATA,
    Column("cluster", String(128), primary_key=True),
    Column("kube_system_uid", String(64), nullable=False),
    Column("api_server", String(512), nullable=False, server_default=""),
    Column("recorded_at", Float, nullable=False),
    Column("recorded_by", String(253), nullable=False, server_default=""),
)
