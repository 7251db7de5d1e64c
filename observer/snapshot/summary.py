"""A short human summary of a FleetSnapshot (`gpufleet collect --summary`).

GPUs per node and model, how many report fresh samples, each node's sample age and exporter
state, the jobs with their ranks and steps, and whether the cycle was degraded and why.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from observer.fleet.model import FleetSnapshot
from observer.snapshot.node_join import unjoined_gpus

STALE_INTERVALS = 2.0


def _age(seconds: float) -> str:
    if not np.isfinite(seconds):
        return "never"
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.1f}m"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def summarize(s: FleetSnapshot, source: str = "") -> str:
    when = datetime.fromtimestamp(s.taken_at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    g = s.gpus
    t = s.telemetry
    interval = t.scrape_interval if t is not None else 30.0
    last = np.full(len(g), np.nan)
    for col in s.metrics.values():
        if col.timestamp.shape[0] == len(g):
            last = np.fmax(last, col.timestamp)
    fresh = (s.taken_at - last) <= STALE_INTERVALS * interval
    lines = [
        f"snapshot at {when} ({s.taken_at:.0f}){' from ' + source if source else ''}: "
        f"{len(g)} GPUs on {len(s.nodes)} nodes, {len(s.pods)} pods, {len(s.jobs)} jobs",
    ]
    if t is not None:
        state = "ok" if t.source_ok else f"DEGRADED: {t.degraded_reason}"
        lines.append(f"telemetry: scrape interval {t.scrape_interval:g}s; source {state}")
    rows = [["NODE", "MODEL", "GPUS", "FRESH", "AGE", "EXPORTER", "K8S", "ALLOCATABLE"]]
    stale: list[str] = []
    for i, node in enumerate(s.nodes):
        on = g.node_index == i
        models = sorted({g.models[m] for m in g.model_index[on].tolist() if m >= 0})
        age = s.taken_at - t.node_last_sample[i] if t is not None else np.nan
        up = bool(t.node_up[i]) if t is not None else True
        if on.any() and (not up or not np.isfinite(age) or age > STALE_INTERVALS * interval):
            stale.append(f"{node.name} ({_age(age)} old{'' if up else ', exporter down'})")
        ready = {"True": "ready", None: "?"}.get(node.conditions.get("Ready"), "not-ready")
        k8s = "cordoned" if not node.schedulable else ready
        rows.append([
            node.name, ",".join(models) or "-", str(int(on.sum())),
            str(int((on & fresh).sum())), _age(age), "up" if up else "DOWN",
            k8s if node.in_kubernetes else "unknown",
            "-" if node.gpus_withdrawn is None else f"{node.gpu_allocatable}/{node.gpu_capacity}",
        ])  # fmt: skip
    lines += _table(rows)
    if s.jobs:
        lines.append("")
        jrows = [["JOB", "RANKS", "GPUS", "STEPS", "STEPS/WINDOW"]]
        for j, job in enumerate(s.jobs):
            ranks = sum(1 for i in job.pod_indices if s.pods[i].rank >= 0)
            steps = s.job_steps.get(job.key)
            inc = s.job_steps_increase.get(job.key)
            jrows.append([
                job.key, str(ranks), str(len(s.gpus_of_job(j))),  # shared GPUs included
                "-" if steps is None else f"{steps:.0f}", "-" if inc is None else f"+{inc:.0f}",
            ])  # fmt: skip
        lines += _table(jrows)
    lines.append("")
    lines.append("stale: " + ("; ".join(stale) if stale else "none"))
    unjoined = unjoined_gpus(s)
    if unjoined:
        lines.append(
            "GPUs on no Kubernetes node (exporter hostname not a node name; set NODE_NAME in "
            "the exporter or relabel kubernetes_node): "
            + "; ".join(f"{h} ({n} GPUs)" for h, n in sorted(unjoined.items()))
        )
    if s.shared_pods:
        shared = len({gpu for gpu, _ in s.shared_pods})
        pods = len({p for _, p in s.shared_pods}) + shared
        lines.append(f"shared GPUs (time-slicing, virtual-GPU series): {shared} GPUs held by "
                     f"{pods} pods")  # fmt: skip
    if s.events:
        lines.append(f"events: {len(s.events)} GPU/node warnings (latest: "
                     f"{s.events[-1].reason} on {s.events[-1].node or '?'})")  # fmt: skip
    return "\n".join(lines)
