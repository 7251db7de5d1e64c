"""Ground truth of a scenario: every injected fault and every confounder, with targets and times.

Detector evaluation scores findings against this file, so it must say exactly what the engine
does: the same target resolution (targets.py) and the same periodic instances (timeline.py).
Times are absolute unix seconds; an open-ended fault ends at the scenario end (`open_ended`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from simulator.counters import FAULT_XID
from simulator.layout import GPU_PRODUCT, Layout
from simulator.scenario import FaultKind, Scenario, WorkloadKind
from simulator.targets import resolve_confounders, resolve_faults
from simulator.timeline import Phase, job_intervals

FINDING: dict[FaultKind, str] = {
    FaultKind.XID79_FALLEN_OFF_BUS: "gpu_lost",
    FaultKind.XID48_DBE: "gpu_xid",
    FaultKind.ROW_REMAP_FAILURE: "gpu_memory",
    FaultKind.THERMAL_THROTTLE: "gpu_throttle",
    FaultKind.POWER_BRAKE: "gpu_throttle",
    FaultKind.NVLINK_CRC_STORM: "gpu_interconnect",
    FaultKind.PCIE_REPLAY_STORM: "gpu_interconnect",
    FaultKind.STRAGGLER: "straggler",
    FaultKind.NCCL_HANG: "nccl_hang",
    FaultKind.FB_LEAK: "anomaly",
    FaultKind.CLOCK_DRIFT: "anomaly",
    FaultKind.NVLINK_BW_COLLAPSE: "anomaly",
    FaultKind.COOLING_DEGRADATION: "anomaly",
}
"""The finding kind a detector should raise for each fault."""
ALSO_ACCEPTABLE: dict[FaultKind, tuple[str, ...]] = {
    FaultKind.XID48_DBE: ("gpu_memory",),
    FaultKind.ROW_REMAP_FAILURE: ("gpu_xid",),
}
"""Other finding kinds that are right for the fault too (XID 48 comes with DBE counts)."""


def _model_of(product: str) -> str:
    """The scenario's model name (A100, H100, H200) of a GPU product string."""
    return next((m for m, name in GPU_PRODUCT.items() if name == product), product)


def _fault_entries(sc: Scenario, layout: Layout) -> list[dict[str, Any]]:
    uuids = layout.gpu_uuid
    out: list[dict[str, Any]] = []
    for f in resolve_faults(sc, layout):
        spec = sc.faults[f.index]
        job_nodes = sorted({p.node for p in layout.pods if p.workload == f.job})
        out.append(
            {
                "id": f"fault-{f.index}",
                "kind": f.kind.value,
                "finding": FINDING[f.kind],
                "also": list(ALSO_ACCEPTABLE.get(f.kind, ())),
                "node": f.node,
                "gpu": f.device,
                "gpu_uuid": str(uuids[f.gpu]) if f.gpu >= 0 else None,
                "model": _model_of(str(layout.gpu_model[f.gpu])) if f.gpu >= 0 else None,
                "job": f.job,
                "rank": spec.rank,
                "job_nodes": job_nodes,
                "xid": FAULT_XID.get(f.kind, 79 if f.kind == FaultKind.XID79_FALLEN_OFF_BUS else 0),
                "severity": f.severity,
                "start": f.start,
                "end": f.end if math.isfinite(f.end) else sc.end,
                "open_ended": not math.isfinite(f.end),
            }
        )
    return out


def _confounder_entries(sc: Scenario, layout: Layout) -> list[dict[str, Any]]:
    faults = resolve_faults(sc, layout)
    confounders = resolve_confounders(sc, layout)
    placed = {p.workload for p in layout.pods}
    out: list[dict[str, Any]] = []

    def add(kind: str, start: float, end: float, **target: Any) -> None:
        entry: dict[str, Any] = {"kind": kind, "job": None, "node": None, "nodes": []}
        entry["periodic"] = False
        entry.update(target)
        out.append({**entry, "start": start, "end": end})

    for c in confounders:
        nodes = [c.node] if c.node else sorted({p.node for p in layout.pods if p.workload == c.job})
        add(c.kind, c.start, c.end, job=c.job, node=c.node, nodes=nodes)
    for w in sc.workloads:
        key = f"{w.namespace}/{w.name}"
        if key not in placed:
            continue
        nodes = sorted({p.node for p in layout.pods if p.workload == key})
        if w.kind == WorkloadKind.TRAINING:
            for iv in job_intervals(sc, w, faults, confounders, horizon=sc.end):
                if iv.periodic and iv.start < sc.end:
                    kind = "checkpoint" if iv.phase == Phase.CHECKPOINT else "eval_phase"
                    add(kind, iv.start, iv.end, job=key, periodic=True, nodes=nodes)
        if w.start > 0 and w.start < sc.duration:
            at = sc.start + w.start
            add("job_start", at, at, job=key, nodes=nodes)
        if w.end is not None and w.end <= sc.duration:
            at = sc.start + w.end
            add("job_finish", at, at, job=key, nodes=nodes)
    out.sort(key=lambda e: (e["start"], e["kind"], e["job"] or "", e["node"] or ""))
    return out


def ground_truth(scenario: Scenario, layout: Layout) -> dict[str, Any]:
    """Every fault and confounder of the scenario, resolved against the layout."""
    sc = scenario
    return {
        "scenario": sc.name,
        "cluster": sc.cluster,
        "seed": sc.seed,
        "start": sc.start,
        "end": sc.end,
        "scrape_interval": sc.scrape_interval,
        "clock_reasons_collected": not sc.shipped_fields_only,
        "unplaced_workloads": list(layout.unplaced),
        "faults": sorted(_fault_entries(sc, layout), key=lambda e: (e["start"], e["id"])),
        "confounders": _confounder_entries(sc, layout),
    }


def write_truth(path: str | Path, truth: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(truth, indent=2, sort_keys=False) + "\n", encoding="utf-8")
