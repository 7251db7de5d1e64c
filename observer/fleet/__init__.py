"""The fleet model and the metric catalog: what a FleetSnapshot holds."""

from observer.fleet.catalog import BY_NAME, Kind, MetricSpec, canonical_name, xid_info
from observer.fleet.model import (
    Event,
    FleetSnapshot,
    GpuTable,
    Job,
    MetricColumn,
    Node,
    NodeName,
    Pod,
    Taint,
    TelemetryHealth,
)

__all__ = [
    "BY_NAME",
    "Event",
    "FleetSnapshot",
    "GpuTable",
    "Job",
    "Kind",
    "MetricColumn",
    "MetricSpec",
    "Node",
    "NodeName",
    "Pod",
    "Taint",
    "TelemetryHealth",
    "canonical_name",
    "xid_info",
]
