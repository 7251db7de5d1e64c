"""Time-sliced GPUs with dcgm-exporter's virtual-GPU series (`KUBERNETES_VIRTUAL_GPUS`: one series
per pod, with `vgpu`): every pod on a GPU is attributed, not one arbitrary pod, and XID counts are
not multiplied by the pods sharing the GPU; through both collectors (issue 27, finding 5)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from observer.fleet.catalog import XID_COUNT_METRIC, xid_count_column
from observer.fleet.model import FleetSnapshot
from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.plan import PromSettings
from observer.scrape.collector import ScrapeCollector, ScrapeSettings
from observer.snapshot import summarize
from remediations.cluster_view import ClusterView
from remediations.playbooks import PLAYBOOKS, Plan, Subject
from remediations.playbooks.reset import holder_of
from remediations.types import IncidentId
from simulator.clock import ManualWall
from simulator.cluster import ClusterOptions
from simulator.scenario import Scenario, scenario_from_dict
from simulator.serve import SimulationHandle, start_simulation
from tests.prometheus_fixture import start_prometheus, write_scenario

MIN = 60.0
NODE = "ts-0000"


def shared_scenario(virtual_gpus: bool = True, namespaces: str = "ml ml ml ml") -> Scenario:
    """One node, two GPUs time-sliced two ways, four one-pod jobs (in `namespaces`, in order): a
    and b share GPU 0, c and d GPU 1; an XID 48 (followed by 45) on GPU 0 at 5 min."""
    jobs: list[dict[str, Any]] = [
        {"name": n, "kind": "training", "namespace": ns, "replicas": 1, "gpus_per_pod": 1}
        for n, ns in zip("abcd", namespaces.split(), strict=True)
    ]
    return scenario_from_dict(
        {
            "name": "time-sliced",
            "duration": 1800,
            "pools": [{"name": "ts", "model": "H100", "nodes": 1, "gpus_per_node": 2,
                       "time_slicing": 2}],
            "workloads": jobs,
            "faults": [{"kind": "xid48_dbe", "node": NODE, "gpu": 0, "start": "5m", "end": "9m"}],
            "exporter": {"version": "4.x", "virtual_gpus": virtual_gpus},
        }
    )  # fmt: skip


def _on_gpus(snap: FleetSnapshot) -> list[set[str]]:
    return [{snap.pods[p].name for p in snap.pods_on_gpu(g)} for g in range(len(snap.gpus))]


def _assert_every_pod_attributed_and_xids_counted_once(snap: FleetSnapshot) -> None:
    assert sorted(j.name for j in snap.jobs) == ["a", "b", "c", "d"]
    # no job looks GPU-less: b shares GPU 0 with a, d GPU 1 with c (old reading: [0], [], [1], [])
    assert [snap.gpus_of_job(j).tolist() for j in range(4)] == [[0], [0], [1], [1]]
    assert _on_gpus(snap) == [{"a-worker-0", "b-worker-0"}, {"c-worker-0", "d-worker-0"}]
    counts = snap.metrics[XID_COUNT_METRIC].value.tolist()
    assert counts == [2.0, 0.0]  # 48 and its follower 45, once each (not once per pod)
    assert snap.metrics[xid_count_column(48)].value.tolist()[0] == 1.0
    text = summarize(snap)  # `gpufleet collect --summary`
    assert "shared GPUs (time-slicing, virtual-GPU series): 2 GPUs held by 4 pods" in text
    assert [ln.split()[2] for ln in text.splitlines() if ln.startswith("ml/")] == ["1"] * 4


@pytest.fixture
def live() -> Iterator[tuple[SimulationHandle, ManualWall]]:
    sc = shared_scenario()
    wall = ManualWall(sc.start)
    handle = start_simulation(sc, wall=wall, options=ClusterOptions(startup_seconds=0))
    yield handle, wall
    handle.stop()


def test_direct_scrape_attributes_every_pod_on_a_shared_gpu(
    live: tuple[SimulationHandle, ManualWall],
) -> None:
    handle, wall = live
    settings = ScrapeSettings(discovery_url=f"{handle.metrics_url}/targets")
    with ScrapeCollector(settings, now=handle.clock.scenario_time) as c:
        wall.advance(6 * MIN)
        snap = c.collect().snapshot
    _assert_every_pod_attributed_and_xids_counted_once(snap)
    _assert_repairs_wait_for_every_pod(snap)


def _assert_repairs_wait_for_every_pod(snap: FleetSnapshot) -> None:
    """Safety: a shared GPU is free only when all its pods are; evicting its pods evicts all."""
    view = ClusterView.from_snapshot(snap)
    uuid = str(snap.gpus.uuid[0])
    xid = Subject(IncidentId("i1"), "gpu_xid", "critical", "XID 48", node=NODE, gpu_uuid=uuid)
    plan = PLAYBOOKS["evict_gpu_pods"].plan(xid, view, PLAYBOOKS["evict_gpu_pods"].params({}))
    assert isinstance(plan, Plan)
    evict = [i for i in plan.intents if i.op == "evict_pods"]
    assert [sorted(i.args["only"]) for i in evict] == [["ml/a-worker-0", "ml/b-worker-0"]]
    assert sorted(evict[0].args["pods_kept"]) == ["ml/c-worker-0", "ml/d-worker-0"]
    # the GPU's first pod gone (evicted), its sharer still holds it: no reset yet
    first = view.pod_of_gpu[uuid]
    gone = {**view.pods, first: replace(view.pods[first], phase="Succeeded")}
    after = replace(view, pods=gone, pods_by_node={})
    sharer = ({"ml/a-worker-0", "ml/b-worker-0"} - {first}).pop()
    assert holder_of(uuid, NODE, after) == sharer


def test_prometheus_attributes_every_pod_on_a_shared_gpu(tmp_path: Path) -> None:
    sc = shared_scenario()
    om = write_scenario(sc, tmp_path / "ts.om", sc.start, sc.start + 7 * MIN)
    prom = start_prometheus(om, tmp_path)
    try:
        with PrometheusCollector(PromSettings(prom.url)) as pc:
            snap = pc.collect(sc.start + 6 * MIN).snapshot
        with PrometheusCollector(PromSettings(prom.url)) as pc:  # the range replay too
            t0 = sc.start + 6 * MIN
            replayed = [r.snapshot for r in pc.collect_range(t0, t0 + 30, step=30.0)]
    finally:
        prom.stop()
    for s in (snap, *replayed):
        _assert_every_pod_attributed_and_xids_counted_once(s)


def test_without_virtual_gpus_the_exporter_names_one_pod_per_gpu(tmp_path: Path) -> None:
    """The exporter's device-to-pod map keeps one pod per device: the others' GPU is not known
    from the series, so it is not guessed (they stay pods without GPUs)."""
    sc = shared_scenario(virtual_gpus=False)
    om = write_scenario(sc, tmp_path / "ts.om", sc.start, sc.start + 7 * MIN)
    prom = start_prometheus(om, tmp_path)
    try:
        with PrometheusCollector(PromSettings(prom.url)) as pc:
            snap = pc.collect(sc.start + 6 * MIN).snapshot
    finally:
        prom.stop()
    assert [len(s) for s in _on_gpus(snap)] == [1, 1]
    assert snap.shared_pods == ()
    assert snap.metrics[XID_COUNT_METRIC].value.tolist() == [2.0, 0.0]
