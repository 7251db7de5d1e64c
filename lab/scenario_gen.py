"""Random scenarios for held-out evaluation: sizes, model mixes, scrape intervals, timings, seeds.

The suite in lab/suite is hand-written; detectors tuned on it could still fail on fleets they
never saw. `random_scenario(seed)` draws a fleet (1-3 pools of A100/H100/H200), workloads
(training with and without steps, checkpoints, evals, late starts and early finishes, inference,
idle pods), one fault of most kinds at random times and targets (never two on one GPU or job),
and confounders (exporter outages on nodes without an active fault, a fleet-wide scrape gap,
application XIDs and a software power cap on serving GPUs).

Fault sizes are drawn across their whole range (issue 15), from below each detector's published
limit (lab.fault_size) to far above it: stragglers 4-37.5 % slower (limit 7 %), NVLink CRC
storms 50-2,500/s (100/s), PCIe replays 9-1,500/min (16/min), thermal and power-brake episodes of
30 s to 25 min (the reason bits must hold 60 s). Faults below a limit are scored apart.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.layout import SimPod, build_layout
from simulator.scenario import Scenario, scenario_from_dict

MODELS = ("A100", "H100", "H200")
STRAGGLER_SEVERITY = (0.16, 0.24, 0.28, 0.32, 0.4, 0.6, 1.0, 1.5)
"""x 25 % slower: 4, 6, 7, 8, 10, 15, 25, 37.5 % (limit 7 %)."""
NVLINK_SEVERITY = (0.1, 0.18, 0.22, 0.3, 1.0, 5.0)
"""x 500 CRC/s: 50, 90, 110, 150, 500, 2,500 (limit 100/s)."""
PCIE_SEVERITY = (0.006, 0.01, 0.0133, 0.02, 0.05, 1.0)
"""x 1,500 replays/min: 9, 15, 20, 30, 75, 1,500 (limit 16/min)."""
THROTTLE_SECONDS = (30, 45, 90, 120, 300, 600, 1500)
"""Thermal and power-brake episode lengths (limit: the reason bits hold 60 s)."""
APP_XIDS = (13, 31, 43, 45)
GPU_FAULTS = (
    "xid79_fallen_off_bus",
    "xid48_dbe",
    "row_remap_failure",
    "thermal_throttle",
    "power_brake",
    "nvlink_crc_storm",
    "pcie_replay_storm",
)


def _serving_confounders(
    rng: np.random.Generator,
    workloads: list[dict[str, Any]],
    minutes: int,
    pods: list[SimPod],
    busy: set[str],
) -> list[dict[str, Any]]:
    """An application XID on a serving GPU and a software power cap on a serving fleet: normal
    operation that must raise no warning. Drawn after everything else; serving workloads only
    (a GPU fault may land on a capped serving GPU: the cap lowers what the fault leaves, as on a
    real fleet); the app XID on a node without a GPU fault, so it never hides a fault's XID."""
    serving = [w for w in workloads if w["kind"] == "inference"]
    if not serving:
        return []
    out: list[dict[str, Any]] = []
    w = serving[int(rng.integers(0, len(serving)))]
    key = f"srv/{w['name']}"
    ranks = [p.rank for p in pods if p.workload == key and p.node not in busy] or [0]
    start = int(rng.integers(5, minutes - 20))
    out.append(
        {
            "kind": "app_xid",
            "job": key,
            "rank": int(rng.choice(ranks)),
            "xid": int(rng.choice(APP_XIDS)),
            "start": f"{start}m",
            "end": f"{start + int(rng.integers(2, 15))}m",
        }
    )
    start = int(rng.integers(5, minutes - 30))
    out.append(
        {
            "kind": "power_cap",
            "job": f"srv/{w['name']}",
            "cap": float(rng.choice([0.5, 0.6, 0.7])),
            "start": f"{start}m",
            "end": f"{start + int(rng.integers(10, 30))}m",
        }
    )
    return out


def random_scenario(seed: int) -> Scenario:
    rng = np.random.default_rng(seed)
    minutes = int(rng.choice([90, 120, 180]))
    interval = str(rng.choice(["15s", "30s"]))
    pools: list[dict[str, Any]] = []
    for k, model in enumerate(rng.permutation(MODELS)[: int(rng.integers(1, 4))]):
        pools.append({"name": f"p{k}", "model": str(model), "nodes": int(rng.integers(4, 24))})
    workloads, jobs = _workloads(rng, pools, minutes)
    faults, used_jobs = _job_faults(rng, jobs, workloads, minutes)
    node_names = [f"{p['name']}-{i:04d}" for p in pools for i in range(p["nodes"])]
    # GPU faults avoid the nodes of jobs with a job fault: a straggler on a GPU that also fell
    # off the bus is not observable as a straggler, and the score would say so.
    draft = scenario_from_dict({"name": "draft", "pools": pools, "workloads": workloads})
    placed = build_layout(draft).pods
    taken = {p.node for p in placed if p.workload in used_jobs}
    node_names = [n for n in node_names if n not in taken] or node_names
    gpu_faults, busy_nodes = _gpu_faults(rng, node_names, minutes)
    faults += gpu_faults
    quiet = [n for n in node_names if n not in busy_nodes]
    confounders = _outages(rng, quiet, minutes)
    confounders.extend(_serving_confounders(rng, workloads, minutes, placed, busy_nodes))
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


def _workloads(
    rng: np.random.Generator, pools: list[dict[str, Any]], minutes: int
) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """Per pool one or two training jobs, the rest of its nodes serving or idle; also the
    training jobs as (key, pool)."""
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
            workloads.append(_training(rng, name, p["name"], replicas, minutes))
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
    return workloads, jobs


def _training(
    rng: np.random.Generator, name: str, pool: str, replicas: int, minutes: int
) -> dict[str, Any]:
    """One training job, with or without checkpoints, evals, a late start, an early end."""
    w: dict[str, Any] = {
        "name": name,
        "kind": "training",
        "namespace": "ml",
        "pool": pool,
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
    return w


def _job_faults(
    rng: np.random.Generator,
    jobs: list[tuple[str, str]],
    workloads: list[dict[str, Any]],
    minutes: int,
) -> tuple[list[dict[str, Any]], set[str]]:
    """A straggler or an NCCL hang in most training jobs; also the jobs that got one."""
    faults: list[dict[str, Any]] = []
    used_jobs: set[str] = set()
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
                    "severity": float(rng.choice(STRAGGLER_SEVERITY)),
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
    return faults, used_jobs


def _gpu_faults(
    rng: np.random.Generator, node_names: list[str], minutes: int
) -> tuple[list[dict[str, Any]], set[str]]:
    """Most GPU fault kinds once, on distinct GPUs; also the nodes they hit."""
    faults: list[dict[str, Any]] = []
    busy_nodes: set[str] = set()
    used_gpus: set[tuple[str, int]] = set()
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
        if kind in ("thermal_throttle", "power_brake"):
            f["start"] = start * 60 + int(rng.integers(0, 30))  # onsets between scrapes
            f["end"] = f["start"] + int(rng.choice(THROTTLE_SECONDS))
            f["severity"] = float(
                rng.choice([0.5, 1.0, 1.5] if kind == "thermal_throttle" else [1.0])
            )
        elif kind not in ("xid79_fallen_off_bus", "xid48_dbe", "row_remap_failure"):
            f["end"] = f"{start + int(rng.integers(10, 25))}m"
        if kind == "nvlink_crc_storm":
            f["severity"] = float(rng.choice(NVLINK_SEVERITY))
        elif kind == "pcie_replay_storm":
            f["severity"] = float(rng.choice(PCIE_SEVERITY))
        faults.append(f)
    return faults, busy_nodes


def _outages(rng: np.random.Generator, quiet: list[str], minutes: int) -> list[dict[str, Any]]:
    """Look-alikes of lost GPUs: an exporter down on a fault-free node or two, a scrape gap."""
    confounders: list[dict[str, Any]] = []
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
    return confounders
