"""The held-out generator draws fault sizes across their whole range (issue 15)."""

from __future__ import annotations

from collections import defaultdict

from lab.fault_size import fault_size
from lab.scenario_gen import random_scenario


def test_sizes_fall_below_and_above_each_published_limit_and_confounders_vary() -> None:
    sides: defaultdict[str, set[bool]] = defaultdict(set)
    confounders: set[str] = set()
    for seed in range(2000, 2012):
        sc = random_scenario(seed)
        confounders |= {str(c.kind) for c in sc.confounders}
        for f in sc.faults:
            entry = {"kind": str(f.kind), "severity": f.severity, "start": f.start,
                     "end": sc.duration if f.end is None else f.end}  # fmt: skip
            sides[str(f.kind)].add(fault_size(entry).above_limit)
    for kind in ("straggler", "nvlink_crc_storm", "pcie_replay_storm", "thermal_throttle"):
        assert sides[kind] == {True, False}, kind
    assert {"app_xid", "power_cap", "scrape_gap", "exporter_down"} <= confounders
