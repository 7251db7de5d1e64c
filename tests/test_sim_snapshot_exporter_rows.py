"""The in-process simulated path (SimSnapshots: tests/test_detectors_sim.py, `eval`) gives the
snapshot a collector builds from the exporter pages, for MIG GPUs (one row per instance, no
GPU_UTIL) and time-sliced GPUs with virtual-GPU series (every pod on a GPU attributed, XID counts
once): compared with the Prometheus collector on the same scenario's backfill (issue 27)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from detectors.suite import DetectorSuite
from lab.simulated import evaluate
from observer.fleet.catalog import XID_COUNT_METRIC
from observer.fleet.model import FleetSnapshot
from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.plan import PromSettings
from simulator.engine import FleetSimulator
from simulator.scenario import Scenario, scenario_from_dict
from simulator.snapshot import SimSnapshots
from tests.prometheus_fixture import start_prometheus, write_scenario

pytestmark = [pytest.mark.prometheus]
MIN = 60.0
FIELDS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP", XID_COUNT_METRIC)


def _scenario() -> Scenario:
    """Two GPUs time-sliced two ways (jobs a, b on GPU 0; c, d on GPU 1) and two MIG GPUs (two
    3g.40gb instances each); an XID 48 on the first MIG GPU at 5 min."""
    jobs: list[dict[str, Any]] = [
        {"name": n, "kind": "training", "namespace": "ml", "pool": "ts", "replicas": 1,
         "gpus_per_pod": 1}
        for n in "abcd"
    ]  # fmt: skip
    return scenario_from_dict(
        {
            "name": "mig-and-time-sliced",
            "duration": 1800,
            "pools": [
                {"name": "ts", "model": "H100", "nodes": 1, "gpus_per_node": 2,
                 "time_slicing": 2},
                {"name": "mig", "model": "H100", "nodes": 1, "gpus_per_node": 2,
                 "mig": {"profile": "3g.40gb", "instances": 2}},
            ],
            "workloads": jobs,
            "faults": [{"kind": "xid48_dbe", "node": "mig-0000", "gpu": 0, "start": "5m",
                        "end": "9m"}],
            "exporter": {"version": "4.x", "virtual_gpus": True},
        }
    )  # fmt: skip


def _rows(snap: FleetSnapshot) -> list[tuple[str, str, str, frozenset[str]]]:
    """(UUID, GPU_I_ID, profile, every pod on it) per GPU row, sorted."""
    g = snap.gpus
    return sorted(
        (str(g.uuid[i]), str(g.mig_instance[i]), str(g.mig_profile[i]),
         frozenset(str(snap.pods[p].key) for p in snap.pods_on_gpu(i)))
        for i in range(len(g))
    )  # fmt: skip


def _values(snap: FleetSnapshot) -> dict[str, dict[tuple[str, str], float]]:
    g = snap.gpus
    out: dict[str, dict[tuple[str, str], float]] = {}
    for name in FIELDS:
        col = snap.metrics[name]
        out[name] = {
            (str(g.uuid[i]), str(g.mig_instance[i])): float(col.value[i]) for i in range(len(g))
        }
    return out


def test_in_process_and_collected_snapshots_agree_on_mig_and_shared_gpus(tmp_path: Path) -> None:
    sc = _scenario()
    at = sc.start + 6 * MIN
    om = write_scenario(sc, tmp_path / "s.om", sc.start, sc.start + 7 * MIN)
    prom = start_prometheus(om, tmp_path)
    try:
        with PrometheusCollector(PromSettings(prom.url)) as pc:
            collected = pc.collect(at).snapshot
    finally:
        prom.stop()
    simulated = SimSnapshots(FleetSimulator(sc)).snapshot(at)
    rows = _rows(simulated)
    assert rows == _rows(collected)
    # what the old in-process path lacked: instances under their GPU, both pods on a shared GPU
    assert [(r[1], r[2]) for r in rows if r[1]] == [("1", "3g.40gb"), ("2", "3g.40gb")] * 2
    assert sorted(len(r[3]) for r in rows if not r[1]) == [2, 2]
    sim_v, col_v = _values(simulated), _values(collected)
    for name in FIELDS:
        assert sim_v[name].keys() == col_v[name].keys(), name
        for key, v in sim_v[name].items():
            w = col_v[name][key]
            assert (np.isnan(v) and np.isnan(w)) or v == pytest.approx(w), (name, key)
    # no GPU_UTIL on MIG instances; the XID counted once on each instance of its GPU
    util = sim_v["DCGM_FI_DEV_GPU_UTIL"]
    assert [np.isnan(v) for (_, mig), v in sorted(util.items()) if mig] == [True] * 4
    assert sorted(sim_v[XID_COUNT_METRIC].values()) == [0.0] * 4 + [2.0, 2.0]


def test_the_detectors_on_the_simulated_path_find_the_mig_xid_once_and_nothing_else() -> None:
    """On the in-process path, as on the collected one: the XID 48 on a MIG GPU is one finding
    at the physical GPU (not one per instance), the GPUs re-read per instance and per pod raise
    no false positive (a lost GPU, an idle shared GPU), scored against the ground truth."""
    suite = DetectorSuite.default([n for n in DetectorSuite.default().names if n != "anomaly"])
    run = evaluate(_scenario(), suite)
    score = run.score
    assert score.missed == () and score.recall == 1.0
    assert score.false_positives == () and score.off_kind == ()
    # one episode per detector that reads a DBE (XID, ECC), none per instance
    episodes = sorted((f.detector, f.node, f.evidence["device"]) for f in run.result.episodes)
    assert episodes == [("gpu_memory", "mig-0000", 0), ("gpu_xid", "mig-0000", 0)]
    xid = next(f for f in run.result.episodes if f.detector == "gpu_xid")
    assert xid.evidence["mig_instances"] == ["1", "2"]  # the instances, as evidence
