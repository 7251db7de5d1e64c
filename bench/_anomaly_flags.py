"""`python -m bench._anomaly_flags SCENARIO.yaml|SEED [--alone]`: the anomaly detector's flags.

Replays one scenario (a suite file, or a held-out seed of lab/scenario_gen.py) on the
simulated path with the default detectors (anomaly on, at info; `--alone`: the anomaly detector
only, whose findings do not depend on the others) and prints, as JSON: anomaly episodes on a
faulty GPU (any fault kind), on a faulty job's other GPUs, and elsewhere (false flags), each
anomaly episode (GPU, onset, end, class), warning/critical episodes of any detector, wall seconds
spent in each detector and the process CPU seconds of the whole run. By hand, one at a time,
not in `make test` or `make bench`.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

from backtesting.replayer import Replayer
from detectors.findings import FindingKind, Severity
from detectors.suite import DetectorSuite
from lab.simulated import frames
from observer.promql import DEFAULT_LOOKBACK
from simulator.engine import FleetSimulator
from simulator.scenario import load_scenario
from simulator.truth import ground_truth


def main(path: str, alone: bool = False) -> dict[str, object]:
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if path.isdigit():
        from lab.scenario_gen import random_scenario  # held-out seeds, as lab.heldout

        sc = random_scenario(int(path))
    else:
        sc = load_scenario(Path(path))
    sim = FleetSimulator(sc)
    truth = ground_truth(sc, sim.layout)
    faulty_gpus = {f["gpu_uuid"]: f["kind"] for f in truth["faults"] if f["gpu_uuid"]}
    faulty_jobs = {f["job"] for f in truth["faults"] if f["job"]}
    rep = Replayer(DetectorSuite.default(["anomaly"]) if alone else DetectorSuite.default())
    per_det: Counter[str] = Counter()
    for now, snap in frames(sim, sc.scrape_interval, 120.0, DEFAULT_LOOKBACK):
        res = rep.step(now, snap)
        per_det.update(res.seconds)
    result = rep.result()
    job_of = {str(u): j for u, j in zip(sim.layout.gpu_uuid, _gpu_jobs(sim), strict=True)}
    on_fault = on_job = elsewhere = 0
    episodes: list[list[object]] = []
    kinds: Counter[str] = Counter()
    loud: Counter[str] = Counter()
    for ep in result.episodes:
        if ep.severity != Severity.INFO:
            loud[f"{ep.kind.value}/{ep.severity.value}"] += 1
        if ep.kind != FindingKind.ANOMALY:
            continue
        if ep.gpu_uuid in faulty_gpus:
            on_fault += 1
            kinds[faulty_gpus[ep.gpu_uuid]] += 1
            where = f"fault {faulty_gpus[ep.gpu_uuid]}"
        elif job_of.get(str(ep.gpu_uuid)) in faulty_jobs:
            on_job += 1
            where = "faulty job's peer"
        else:
            elsewhere += 1
            where = "false flag"
        episodes.append([ep.gpu_uuid, ep.first_seen, ep.last_seen, where])
    return {
        "scenario": sc.name,
        "gpus": len(sim.layout.gpu_uuid),
        "cycles": result.cycles,
        "anomaly_on_faulty_gpu": on_fault,
        "anomaly_on_fault_kinds": dict(kinds),
        "anomaly_on_faulty_job_peer": on_job,
        "anomaly_false_flags": elsewhere,
        "anomaly_episodes": episodes,
        "warning_critical_episodes": dict(loud),
        "detector_seconds": {k: round(v, 1) for k, v in sorted(per_det.items())},
        "process_cpu_s": round(time.process_time() - cpu0, 1),
        "wall_s": round(time.perf_counter() - wall0, 1),
    }


def _gpu_jobs(sim: FleetSimulator) -> list[str | None]:
    """The workload holding each GPU (None: free), from the simulator's layout."""
    lay = sim.layout
    jobs: list[str | None] = [None] * len(lay.gpu_uuid)
    for pod in lay.pods:
        for d in pod.gpu_indices:
            jobs[lay.gpu_position(pod.node, d)] = pod.workload
    return jobs


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], "--alone" in sys.argv[2:]), indent=1))
