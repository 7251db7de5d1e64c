"""The config of two `gpufleet run` replicas with leader election on one journal: what the
failover tests and the failover benchmark both start, so the two measure the same set-up."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from harness.live_policy import live_policy_dict
from simulator.serve import SimulationHandle

LEASE = 4.0
"""Seconds of the replicas' Lease (renewed every second)."""
DRAIN_CRITICAL: dict[str, Any] = {
    "name": "drain-critical",
    "match": {"kinds": ["gpu_xid", "gpu_memory"], "severities": ["critical"]},
    "playbook": "drain",
    "mode": "auto",
    "params": {"timeout": "10m", "backoff_initial": "4s"},
}


def failover_config(
    tmp: Path, h: SimulationHandle, store_url: str, rules: Sequence[dict[str, Any]]
) -> Path:
    """Two replicas' config: a live policy of `rules`, the simulator's exporters and API,
    leader election on a 4-s Lease renewed every second, the journal at `store_url`."""
    assert h.kubeconfig is not None
    policy = live_policy_dict(list(rules))
    (tmp / "policy.yaml").write_text(yaml.safe_dump(policy))
    cfg = {
        "cluster": h.scenario.cluster,
        "store_url": store_url,
        "kubeconfig": str(h.kubeconfig),
        "policy": str(tmp / "policy.yaml"),
        "service": {
            "interval": h.scenario.scrape_interval / h.clock.speed,
            "source": {"discovery_url": f"{h.metrics_url}/targets"},
            "http": {"host": "127.0.0.1", "port": 0},
            "leader_election": {"enabled": True, "lease_duration": f"{LEASE:.0f}s",
                                "renew_every": "1s"},
        },
    }  # fmt: skip
    path = tmp / "gpufleet.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path
