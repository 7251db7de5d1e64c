"""MIG GPUs simulated in flex mode, re-partitioned while running: not a lost GPU, through the
simulator's live exporters (direct scrape) and a backfilled Prometheus (issue 27, finding 4)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from detectors import gpu_lost
from detectors.findings import Finding
from observer.fleet.model import FleetSnapshot
from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.plan import PromSettings
from observer.scrape.collector import ScrapeCollector, ScrapeSettings
from simulator.clock import ManualWall
from simulator.cluster import ClusterOptions
from simulator.scenario import Scenario, scenario_from_dict
from simulator.serve import start_simulation
from tests.prometheus_fixture import start_prometheus, write_scenario

MIN = 60.0


def _scenario() -> Scenario:
    """Two H100s in MIG flex mode (two 3g.40gb instances each) and a whole-GPU node; GPU 0's
    instance 2 is replaced by instance 3 at 5 min."""
    return scenario_from_dict(
        {
            "name": "mig-repartition",
            "duration": 1800,
            "pools": [
                {"name": "mig", "model": "H100", "nodes": 1, "gpus_per_node": 2,
                 "mig": {"profile": "3g.40gb", "instances": 2}},
                {"name": "whole", "model": "H100", "nodes": 1, "gpus_per_node": 2},
            ],
            "mig_repartitions": [{"node": "mig-0000", "gpu": 0, "at": "5m"}],
        }
    )  # fmt: skip


def _instances(snap: FleetSnapshot) -> list[tuple[str, int, str, str]]:
    """(node, device, GPU_I_ID, profile) per GPU row."""
    g = snap.gpus
    return [
        (str(snap.nodes[int(g.node_index[i])].name), int(g.device_index[i]),
         str(g.mig_instance[i]), str(g.mig_profile[i]))
        for i in range(len(g))
    ]  # fmt: skip


def _lost(snaps: Iterable[FleetSnapshot]) -> list[Finding]:
    state = None
    found: list[Finding] = []
    for snap in snaps:
        out, state = gpu_lost.detect(snap, state, snap.taken_at, gpu_lost.Params())
        found += out
    return found


def _check(snaps: list[FleetSnapshot]) -> None:
    before, after = snaps[0], snaps[-1]
    assert _instances(before)[:4] == [
        ("mig-0000", 0, "1", "3g.40gb"), ("mig-0000", 0, "2", "3g.40gb"),
        ("mig-0000", 1, "1", "3g.40gb"), ("mig-0000", 1, "2", "3g.40gb"),
    ]  # fmt: skip
    rows = _instances(after)
    assert ("mig-0000", 0, "3", "3g.40gb") in rows
    # the destroyed instance is still a row, silent for 7 minutes: what read as a lost GPU
    gone = rows.index(("mig-0000", 0, "2", "3g.40gb"))
    assert not after.metrics["DCGM_FI_DEV_GPU_TEMP"].present()[gone]
    # GPU_UTIL is not supported on MIG: only the whole GPUs have it
    util = before.metrics["DCGM_FI_DEV_GPU_UTIL"].present().tolist()
    assert util == [False] * 4 + [True, True]
    assert _lost(snaps) == []


def test_repartitioning_is_not_a_lost_gpu_by_direct_scrape() -> None:
    sc = _scenario()
    wall = ManualWall(sc.start + 4 * MIN)
    handle = start_simulation(sc, wall=wall, options=ClusterOptions(startup_seconds=0))
    snaps: list[FleetSnapshot] = []
    try:
        settings = ScrapeSettings(discovery_url=f"{handle.metrics_url}/targets")
        with ScrapeCollector(settings, now=handle.clock.scenario_time) as c:
            for _ in range(17):  # 4 to 12 minutes, every 30 s
                snaps.append(c.collect().snapshot)
                wall.advance(30)
    finally:
        handle.stop()
    _check(snaps)


def test_repartitioning_is_not_a_lost_gpu_through_prometheus(tmp_path: Path) -> None:
    sc = _scenario()
    om = write_scenario(sc, tmp_path / "mig.om", sc.start, sc.start + 13 * MIN)
    prom = start_prometheus(om, tmp_path)
    try:
        with PrometheusCollector(PromSettings(prom.url)) as pc:
            snaps = [r.snapshot for r in pc.collect_range(sc.start + 4 * MIN, sc.start + 12 * MIN,
                                                          step=30.0)]  # fmt: skip
    finally:
        prom.stop()
    _check(snaps)
