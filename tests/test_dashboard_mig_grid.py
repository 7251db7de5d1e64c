"""The fleet page's pool drill-down draws a MIG GPU's instances side by side under their GPU's
column, not as GPUs of their own (issue 27: the GPU is the grain)."""

from __future__ import annotations

import pandas as pd  # type: ignore[import-untyped]

from dashboards.views.fleet import grid


def test_mig_instances_sit_under_their_gpu() -> None:
    gpus = pd.DataFrame(
        {
            "node": ["n1", "n1", "n1"],
            "device": [0, 0, 1],
            "mig_instance": ["1", "2", ""],
            "health": ["healthy", "degraded", "healthy"],
            "utilization": [None, None, 80.0],
            "job": ["", "", "ml/a"],
            "issue": ["", "XID 48", ""],
            "model": ["NVIDIA H100"] * 3,
        }
    )
    spec = grid(gpus, "health").to_dict()
    enc = spec["encoding"]
    assert enc["x"]["field"] == "gpu" and enc["xOffset"]["field"] == "instance"
    rows = next(iter(spec["datasets"].values()))
    cells = [(r["gpu"], r["instance"], r["health"]) for r in rows]
    # two GPU columns (the old grid had three: "0/1", "0/2" and "1")
    assert cells == [(0, "MIG 1", "healthy"), (0, "MIG 2", "degraded"), (1, "", "healthy")]
    assert "instance" in [t["field"] for t in enc["tooltip"]]
