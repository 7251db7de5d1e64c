"""A FleetSnapshot as plain JSON-able data (`gpufleet collect --output`), NaN as null.

Columns stay columns (one list per field over GPUs), so a 10k-GPU dump is a few lists rather
than 10k objects, and it reads back into numpy with one `np.array(..., dtype=float)` per column.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from observer.fleet.model import FleetSnapshot, MetricColumn


def _floats(arr: np.ndarray | None) -> list[float | None] | None:
    if arr is None:
        return None
    return [None if math.isnan(x) else x for x in arr.astype(float).tolist()]


def _column(col: MetricColumn) -> dict[str, Any]:
    out: dict[str, Any] = {"value": _floats(col.value), "timestamp": _floats(col.timestamp)}
    if col.increase is not None:
        out["increase"] = _floats(col.increase)
        out["window_seconds"] = col.window_seconds
    if col.span is not None:  # seconds each GPU's increase covers (rates divide by it)
        out["span_seconds"] = _floats(col.span)
    return out


def snapshot_to_dict(s: FleetSnapshot) -> dict[str, Any]:
    g = s.gpus
    names = [n.name for n in s.nodes]
    t = s.telemetry
    return {
        "taken_at": s.taken_at,
        "cluster": s.cluster,
        "nodes": [
            {
                "name": n.name,
                "in_kubernetes": n.in_kubernetes,
                "schedulable": n.schedulable,
                "gpu_capacity": n.gpu_capacity,
                "gpu_allocatable": n.gpu_allocatable,
                "conditions": dict(n.conditions),
                "labels": dict(n.labels),
                "taints": [{"key": x.key, "value": x.value, "effect": x.effect} for x in n.taints],
            }
            for n in s.nodes
        ],
        "gpus": {
            "uuid": g.uuid.tolist(),
            "node": [names[i] for i in g.node_index.tolist()],
            "device_index": g.device_index.tolist(),
            "model": [g.models[i] if i >= 0 else "" for i in g.model_index.tolist()],
            "pod_index": g.pod_index.tolist(),
            "job_index": g.job_index.tolist(),
            "mig_instance": g.mig_instance.tolist(),
            "mig_profile": g.mig_profile.tolist(),
            "pci_bus_id": g.pci_bus_id.tolist(),
        },
        "pods": [
            {
                "namespace": p.namespace,
                "name": p.name,
                "node": p.node,
                "phase": p.phase,
                "job_index": p.job_index,
                "rank": p.rank,
                "labels": dict(p.labels),
            }
            for p in s.pods
        ],
        "jobs": [
            {"key": j.key, "kind": j.kind, "pod_indices": list(j.pod_indices)} for j in s.jobs
        ],
        "metrics": {name: _column(col) for name, col in sorted(s.metrics.items())},
        "job_steps": dict(s.job_steps),
        "job_steps_increase": dict(s.job_steps_increase),
        "telemetry": None
        if t is None
        else {
            "node_last_sample": _floats(t.node_last_sample),
            "node_up": t.node_up.tolist(),
            "scrape_interval": t.scrape_interval,
            "source_ok": t.source_ok,
            "degraded_reason": t.degraded_reason,
        },
        "events": [
            {
                "time": e.time,
                "reason": e.reason,
                "message": e.message,
                "node": e.node,
                "gpu_uuid": e.gpu_uuid,
                "source": e.source,
                "involved_kind": e.involved_kind,
                "involved_name": e.involved_name,
                "count": e.count,
            }
            for e in s.events
        ],
    }
