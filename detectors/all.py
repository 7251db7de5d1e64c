"""Imports every built-in detector module so that each registers itself by name."""

from __future__ import annotations

from detectors import (  # noqa: F401  (imported for registration)
    anomaly,
    gpu_idle,
    gpu_interconnect,
    gpu_lost,
    gpu_memory,
    gpu_throttle,
    gpu_xid,
    monitoring_gap,
    nccl_hang,
    straggler,
)

ORDER = (
    "monitoring_gap",
    "gpu_lost",
    "gpu_xid",
    "gpu_memory",
    "gpu_throttle",
    "gpu_interconnect",
    "straggler",
    "nccl_hang",
    "gpu_idle",
    "anomaly",
)
"""Run order: the telemetry judgement first, so its findings lead each cycle's list."""
