"""Random scenarios for held-out evaluation: sizes, model mixes, scrape intervals, timings, seeds.

The suite in eval/suite is hand-written; detectors tuned on it could still fail on fleets they
never saw. `random_scenario(seed)` draws a fleet (1-3 pools of A100/H100/H200), workloads
(training with and without steps, checkpoints, evals, late starts and early finishes, inference,
idle pods), one fault of most kinds at random times and targets (never two on one GPU or job),
and confounders (exporter outages on nodes without an active fault, a fleet-wide scrape gap).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.layout import build_layout
from simulator.scenario import Scenario, scenario_from_dict

MODELS = ("A100", "H100", "H200")
GPU_FAULTS = (
    "xid79_fallen_off_bus",
    "xid48_dbe",
    "row_remap_failure",
    "thermal_throttle",
    "power_brake",
    "nvlink_crc_storm",
    "pcie_replay_storm",
)


def random_scenario(seed: int) -> Scenario:
    rng = np.random.default_rng(seed)
    minutes = int(rng.choice([90, 120, 180]))
    interval = str(rng.choice(["15s", "30s"]))
    pools: list[dict[str, Any]] = []
    for k, model in enumerate(rng.permutation(MODELS)[: int(rng.integers(1, 4))]):
        pools.append({"name": f"p{k}", "model": str(model), "nodes": int(rng.integers(4, 24))})
    workloads: list[dict[str, Any]] = []
    jobs: list[tuple[str, str]] = []  # (key, pool)
    for p in pools:
        free = p["nodes"]
        for j in range(int(rng.integers(1, 3))):
            replicas = int(min(free - 1, rng.integers(2, 9)))
            if replicas < 2:
                break
            free -= replicas
            name = f"train-{p['name']}-{j}"
            w: dict[str, Any] = {
                "name": name,
                "kind": "training",
                "namespace": "ml",
                "pool": p["name"],
                "replicas": replicas,
                "gpus_per_pod": 8,
                "steps_metric": bool(rng.random() < 0.5),
            }
            if rng.random() < 0.6:
                w["checkpoint_every"] = f"{int(rng.integers(15, 40))}m"
                w["checkpoint_duration"] = f"{int(rng.integers(60, 200))}s"
            if rng.random() < 0.5:
                w["eval_every"] = f"{int(rng.integers(20, 45))}m"
                w["eval_duration"] = f"{int(rng.integers(2, 6))}m"
            if rng.random() < 0.3:
                w["start"] = f"{int(rng.integers(1, 10))}m"
            if rng.random() < 0.3:
                w["end"] = f"{minutes - int(rng.integers(5, 15))}m"
            workloads.append(w)
            jobs.append((f"ml/{name}", p["name"]))
        if free >= 1:
            kind = "inference" if rng.random() < 0.7 else "idle"
            workloads.append(
                {
                    "name": f"{kind}-{p['name']}",
                    "kind": kind,
                    "namespace": "srv",
                    "pool": p["name"],
                    "replicas": free * 4,
                    "gpus_per_pod": 2,
                    "load": 0.6,
                }
            )
    faults: list[dict[str, Any]] = []
    busy_nodes: set[str] = set()
    used_jobs: set[str] = set()
    used_gpus: set[tuple[str, int]] = set()
    node_names = [f"{p['name']}-{i:04d}" for p in pools for i in range(p["nodes"])]
    for key, _pool in jobs:
        roll = rng.random()
        w = next(w for w in workloads if f"ml/{w['name']}" == key)
        lo = 12 + int(str(w.get("start", "0m"))[:-1])
        hi = (int(str(w["end"])[:-1]) if "end" in w else minutes) - 25
        if hi <= lo:
            continue
        start = int(rng.integers(lo, hi))
        if roll < 0.45:
            faults.append(
                {
                    "kind": "straggler",
                    "job": key,
                    "rank": int(rng.integers(0, w["replicas"])),
                    "start": f"{start}m",
                    "end": f"{start + 20}m",
                    "severity": float(rng.choice([0.4, 0.6, 1.0, 1.5])),
                }
            )
            used_jobs.add(key)
        elif roll < 0.8:
            faults.append(
                {
                    "kind": "nccl_hang",
                    "job": key,
                    "start": f"{start}m",
                    "end": f"{start + int(rng.integers(5, 15))}m",
                }
            )
            used_jobs.add(key)
    # GPU faults avoid the nodes of jobs with a job fault: a straggler on a GPU that also fell
    # off the bus is not observable as a straggler, and the score would say so.
    draft = scenario_from_dict({"name": "draft", "pools": pools, "workloads": workloads})
    taken = {p.node for p in build_layout(draft).pods if p.workload in used_jobs}
    node_names = [n for n in node_names if n not in taken] or node_names
    for kind in GPU_FAULTS:
        if rng.random() < 0.3:
            continue
        node = str(rng.choice(node_names))
        gpu = int(rng.integers(0, 8))
        if (node, gpu) in used_gpus:
            continue
        used_gpus.add((node, gpu))
        busy_nodes.add(node)
        start = int(rng.integers(5, minutes - 30))
        f: dict[str, Any] = {"kind": kind, "node": node, "gpu": gpu, "start": f"{start}m"}
        if kind not in ("xid79_fallen_off_bus", "xid48_dbe", "row_remap_failure"):
            f["end"] = f"{start + int(rng.integers(10, 25))}m"
        faults.append(f)
    confounders: list[dict[str, Any]] = []
    quiet = [n for n in node_names if n not in busy_nodes]
    for _ in range(int(rng.integers(1, 3)) if quiet else 0):
        node = str(rng.choice(quiet))
        start = int(rng.integers(5, minutes - 20))
        confounders.append(
            {
                "kind": "exporter_down",
                "node": node,
                "start": f"{start}m",
                "end": f"{start + int(rng.integers(1, 15))}m",
            }
        )
    gap = int(rng.integers(10, minutes - 10))
    confounders.append({"kind": "scrape_gap", "start": f"{gap}m", "end": f"{gap + 2}m"})
    data = {
        "name": f"random-{seed}",
        "seed": seed,
        "duration": f"{minutes}m",
        "scrape_interval": interval,
        "pools": pools,
        "workloads": workloads,
        "faults": faults,
        "confounders": confounders,
    }
    return scenario_from_dict(data, f"<random {seed}>")
