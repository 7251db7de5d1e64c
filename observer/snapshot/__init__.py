"""Snapshot building: collected columns -> one frozen FleetSnapshot."""

from observer.snapshot.builder import BuildReport, SnapshotBuilder, build_snapshot
from observer.snapshot.cycle_stats import CycleStats, QueryStat
from observer.snapshot.inputs import ExporterHealth, GpuColumns, MetricSeries, PodSeries
from observer.snapshot.json_dump import snapshot_to_dict
from observer.snapshot.node_join import join_hostnames, unjoined_gpus
from observer.snapshot.summary import summarize

__all__ = [
    "BuildReport",
    "CycleStats",
    "ExporterHealth",
    "GpuColumns",
    "MetricSeries",
    "PodSeries",
    "QueryStat",
    "SnapshotBuilder",
    "build_snapshot",
    "join_hostnames",
    "snapshot_to_dict",
    "summarize",
    "unjoined_gpus",
]
