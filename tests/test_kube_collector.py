"""The Kubernetes collector with the real `kubernetes` client against the simulated API:
list + watch, relist on 410, backoff on 429 (Retry-After) and 500, GPU/node Warning events."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from harness.k8s_sim import Sim, running_sim
from observer.kube.collector import KubeCollector, KubeSettings
from observer.snapshot.builder import SnapshotBuilder
from observer.snapshot.inputs import GpuColumns

FAST = dict(watch_timeout=2, request_timeout=5.0, backoff_initial=0.05, backoff_max=0.5)


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(tmp_path, history=50) as s:
        yield s


@pytest.fixture
def v1(sim: Sim) -> Iterator[client.CoreV1Api]:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(sim.kubeconfig), client_configuration=cfg)
    with client.ApiClient(cfg) as api:
        yield client.CoreV1Api(api)


def until(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def collector(sim: Sim, **kw: object) -> KubeCollector:
    settings = KubeSettings(kubeconfig=str(sim.sa_kubeconfig), **{**FAST, **kw})  # type: ignore[arg-type]
    return KubeCollector(settings)


def test_list_watch_and_records_for_the_builder(sim: Sim, v1: client.CoreV1Api) -> None:
    with collector(sim) as kube:
        assert kube.wait_synced(10)
        assert [n.name for n in sorted(kube.nodes(), key=lambda n: n.name)] == [
            f"h100-000{i}" for i in range(4)
        ]
        assert all(n.ready and n.schedulable for n in kube.nodes())
        assert len(kube.pods()) == 13
        v1.patch_node("h100-0001", {"spec": {"unschedulable": True}})
        assert until(lambda: not {str(n.name): n for n in kube.nodes()}["h100-0001"].schedulable)
        v1.delete_namespaced_pod("serve-0", "serving")
        assert until(lambda: "serving/serve-0" not in {p.key for p in kube.pods()})
        nodes, pods = kube.nodes(), kube.pods()
    assert not kube.running  # stopped promptly
    snap = SnapshotBuilder().build(0.0, GpuColumns.from_label_dicts([]), {}, nodes=nodes, pods=pods)
    jobs = {str(j.key): [snap.pods[i].name for i in j.pod_indices] for j in snap.jobs}
    assert jobs["ml/train"] == ["train-worker-0", "train-worker-1"]
    assert jobs["ml/big"] == ["big-worker-0"]


def test_a_read_converts_only_what_changed_since_the_last(sim: Sim, v1: client.CoreV1Api) -> None:
    """Issue 25: every cycle read every node and pod of the watch cache anew (most of the
    service cycle at 12,500 nodes). Unchanged objects give the very same record again; a
    changed one gives a new record with the change."""
    with collector(sim) as kube:
        assert kube.wait_synced(10)
        first = {str(n.name): n for n in kube.nodes()}
        pods = {p.key: p for p in kube.pods()}
        v1.patch_node("h100-0002", {"metadata": {"labels": {"team": "infra"}}})
        assert until(lambda: "team" in {str(n.name): n for n in kube.nodes()}["h100-0002"].labels)
        again = {str(n.name): n for n in kube.nodes()}
        assert again["h100-0002"] is not first["h100-0002"]
        assert again["h100-0002"].labels["team"] == "infra"
        assert all(again[k] is first[k] for k in first if k != "h100-0002")
        assert all(p is pods[p.key] for p in kube.pods())
        v1.delete_namespaced_pod("serve-0", "serving")
        assert until(lambda: "serving/serve-0" not in {p.key for p in kube.pods()})


def test_relist_after_410_gone(sim: Sim, v1: client.CoreV1Api) -> None:
    with collector(sim) as kube:
        assert kube.wait_synced(10)
        sim.api.faults.add(r"^/api/v1/nodes$", 410, count=1, query="watch=true")
        assert until(lambda: kube.stats.relists_after_gone.get("nodes", 0) >= 1)
        v1.patch_node("h100-0002", {"metadata": {"labels": {"after": "gone"}}})
        assert until(lambda: {str(n.name): n for n in kube.nodes()}["h100-0002"].labels.get("after")
                     == "gone")  # fmt: skip
        assert kube.stats.lists["nodes"] >= 2


def test_backoff_on_429_with_retry_after_and_on_500(sim: Sim, v1: client.CoreV1Api) -> None:
    throttle = sim.api.faults.add(r"^/api/v1/nodes$", 429, count=2, retry_after=1)
    broken = sim.api.faults.add(r"^/api/v1/pods$", 500, count=3)
    t0 = time.monotonic()
    with collector(sim) as kube:
        assert kube.wait_synced(15)
        waited = time.monotonic() - t0
        assert throttle.hits == 2 and broken.hits == 3
        assert waited >= 2.0  # two Retry-After: 1 waits
        assert kube.stats.errors["nodes:429"] == 2 and kube.stats.errors["pods:500"] == 3
        sim.api.faults.add(r"^/api/v1/pods$", 500, count=2, query="watch=true")
        v1.delete_namespaced_pod("serve-1", "serving")
        assert until(lambda: "serving/serve-1" not in {p.key for p in kube.pods()})
        assert kube.running


def test_gpu_and_node_warning_events(sim: Sim, v1: client.CoreV1Api) -> None:
    uuid = "GPU-0aa275cc-8aad-5550-bbfb-e9d0da29e596"

    def event(kind: str, name: str, ns: str, type_: str, reason: str, msg: str, comp: str) -> None:
        ref = client.V1ObjectReference(
            kind=kind, name=name, namespace=ns if kind == "Pod" else None
        )
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name="t-"), involved_object=ref, reason=reason,
            message=msg, type=type_, source=client.V1EventSource(component=comp),
        )  # fmt: skip
        v1.create_namespaced_event(ns, body)

    with collector(sim, event_buffer=3) as kube:
        assert kube.wait_synced(10)
        event("Node", "h100-0002", "default", "Warning", "NVRMXid",
              f"NVRM: Xid (PCI:0000:18:00): 79, GPU {uuid} has fallen off the bus",
              "node-problem-detector")  # fmt: skip
        event("Pod", "train-worker-0", "ml", "Warning", "BackOff", "Back-off restarting", "kubelet")
        event("Node", "h100-0003", "default", "Normal", "Starting", "kubelet started", "kubelet")
        unhealthy = "Allocate failed: requested nvidia.com/gpu devices are unhealthy"
        event("Pod", "big-worker-0", "ml", "Warning", "UnexpectedAdmission", unhealthy, "kubelet")
        assert until(lambda: len(kube.events()) == 2)
        xid, admission = sorted(kube.events(), key=lambda e: e.reason)
        assert (xid.node, xid.gpu_uuid, xid.source) == ("h100-0002", uuid, "node-problem-detector")
        assert admission.node == "h100-0002" and admission.involved_kind == "Pod"
        for i in range(5):
            event("Node", "h100-0000", "default", "Warning", "NodeNotReady", f"n{i}", "kubelet")
        assert until(lambda: [e.message for e in kube.events()] == ["n2", "n3", "n4"])


def test_gpu_capacity_and_allocatable_from_the_api_and_the_kube_state_page(tmp_path: Path) -> None:
    """XID 79 on one GPU: the simulated device plugin withdraws it; the Kubernetes collector
    and the serve-mode kube-state-metrics page (the scrape collector's parser) both see 7/8."""
    from observer.scrape.exposition import parse_page
    from observer.snapshot.kube_records import records_from_series
    from simulator.engine import FleetSimulator
    from simulator.metrics_server import LiveMetrics

    fault = {"kind": "xid79_fallen_off_bus", "node": "h100-0003", "gpu": 0, "start": "5m"}
    with running_sim(tmp_path, faults=[fault]) as sim, collector(sim) as kube:
        assert kube.wait_synced(10)
        assert {(n.gpu_allocatable, n.gpu_capacity) for n in kube.nodes()} == {(8, 8)}
        sim.advance(6 * 60)
        assert until(
            lambda: {str(n.name): n for n in kube.nodes()}["h100-0003"].gpus_withdrawn == 1
        )
        page = LiveMetrics(FleetSimulator(sim.cluster.scenario, sim.cluster.layout), sim.cluster)
        rows: list[dict[str, Any]] = [
            {"metric": {"__name__": name, **labels}, "value": [0.0, str(v)]}
            for name, labels, v in parse_page(page.kube_state_page()).kube
        ]
    gpu_rows = [r["metric"] for r in rows if r["metric"].get("resource") == "nvidia_com_gpu"]
    assert gpu_rows[0]["unit"] == "integer"  # kube-state-metrics' extended-resource unit
    nodes = {str(n.name): n for n in records_from_series(rows, [], ())[0]}
    assert (nodes["h100-0003"].gpu_allocatable, nodes["h100-0003"].gpu_capacity) == (7, 8)
    assert (nodes["h100-0001"].gpu_allocatable, nodes["h100-0001"].gpu_capacity) == (8, 8)
