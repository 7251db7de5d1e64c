"""Small scenarios for the simulator tests: every fault kind and confounder on a 40-GPU fleet."""

from __future__ import annotations

from typing import Any

from simulator.scenario import Scenario, scenario_from_dict

MIN = 60.0

EVERY_FAULT_FLEET: dict[str, Any] = {
    "name": "small",
    "seed": 3,
    "cluster": "test",
    "duration": "40m",
    "scrape_interval": "30s",
    "pools": [
        {"name": "h100", "model": "H100", "nodes": 3},
        {"name": "a100", "model": "A100", "nodes": 2},
    ],
    "workloads": [
        {
            "name": "train",
            "kind": "training",
            "pool": "h100",
            "replicas": 2,
            "steps_metric": True,
            "step_time": "1s",
            "checkpoint_every": "15m",
            "checkpoint_duration": "60s",
        },
        {
            "name": "hangjob",
            "kind": "training",
            "namespace": "research",
            "pool": "a100",
            "replicas": 1,
            "job_label": "jobset.sigs.k8s.io/jobset-name",
            "steps_metric": True,
            "start": "2m",
            "end": "35m",
        },
        {
            "name": "serve",
            "kind": "inference",
            "namespace": "serving",
            "pool": "a100",
            "replicas": 2,
            "gpus_per_pod": 2,
            "load": 0.6,
        },
        {"name": "notebook", "kind": "idle", "pool": "a100", "replicas": 1, "gpus_per_pod": 2},
    ],
    "faults": [
        {
            "kind": "xid79_fallen_off_bus",
            "node": "h100-0002",
            "gpu": 0,
            "start": "5m",
            "end": "30m",
        },
        {"kind": "xid48_dbe", "node": "h100-0002", "gpu": 1, "start": "5m"},
        {"kind": "row_remap_failure", "node": "h100-0002", "gpu": 2, "start": "5m"},
        {"kind": "thermal_throttle", "node": "h100-0002", "gpu": 3, "start": "5m", "end": "20m"},
        {"kind": "power_brake", "node": "h100-0002", "gpu": 4, "start": "5m", "end": "20m"},
        {"kind": "nvlink_crc_storm", "node": "h100-0002", "gpu": 5, "start": "5m", "end": "20m"},
        {"kind": "pcie_replay_storm", "node": "h100-0002", "gpu": 6, "start": "5m", "end": "20m"},
        {"kind": "straggler", "job": "default/train", "rank": 1, "start": "10m", "end": "20m"},
        {"kind": "nccl_hang", "job": "research/hangjob", "start": "22m", "end": "28m"},
    ],
    "confounders": [
        {"kind": "exporter_down", "node": "a100-0001", "start": "5m", "end": "8m"},
        {"kind": "scrape_gap", "start": "30m", "end": "31m"},
        {"kind": "checkpoint", "job": "default/train", "start": "25m", "end": "26m"},
        {"kind": "eval_phase", "job": "default/train", "start": "32m", "end": "34m"},
    ],
}
"""Every fault kind and confounder of the simulator on 40 GPUs (3 H100 and 2 A100 nodes) over
40 minutes: the simulator tests' fleet (`small()` is its Scenario)."""


def small() -> Scenario:
    return scenario_from_dict(EVERY_FAULT_FLEET, "small.yaml")
