"""The real `kubernetes` Python client against the simulated API: lists, watches, 410, faults,
policy/v1 evictions with PodDisruptionBudgets, leases and events."""

from __future__ import annotations

import datetime as dt
import json
import select
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch

from harness.k8s_sim import (
    KUBE_FLEET,
    Sim,
    labels_of,
    meta,
    name_of,
    present,
    running_sim,
    spec,
    status,
)


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(tmp_path, history=50) as s:
        yield s


@pytest.fixture
def api(sim: Sim) -> Iterator[client.ApiClient]:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(sim.kubeconfig), client_configuration=cfg)
    with client.ApiClient(cfg) as c:
        yield c


def eviction(name: str, namespace: str, dry_run: bool = False) -> client.V1Eviction:
    opts = client.V1DeleteOptions(dry_run=["All"]) if dry_run else None
    object_meta = client.V1ObjectMeta(name=name, namespace=namespace)
    return client.V1Eviction(metadata=object_meta, delete_options=opts)


def owner_kind(obj: client.V1Pod) -> str:
    """The kind of the pod's first owner reference."""
    return present(meta(obj).owner_references, "ownerReferences")[0].kind


def namespaced_name(event: client.CoreV1Event) -> tuple[str, str]:
    return present(meta(event).namespace, "metadata.namespace"), name_of(event)


def test_lists_deserialise(api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    nodes = v1.list_node()
    assert [name_of(n) for n in nodes.items] == [f"h100-000{i}" for i in range(4)]
    assert int(present(meta(nodes).resource_version, "resourceVersion")) > 0
    node = nodes.items[0]
    assert present(status(node).allocatable, "allocatable")["nvidia.com/gpu"] == "8"
    assert labels_of(node)["gpufleet.io/pool"] == "h100"
    conditions = present(status(node).conditions, "node conditions")
    assert {c.type: c.status for c in conditions}["Ready"] == "True"
    assert present(status(node).node_info, "nodeInfo").kubelet_version.startswith("v1.")
    pods = v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=h100-0000")
    by_name = {name_of(p): p for p in pods.items}
    assert set(by_name) == {
        "train-worker-0", "train-worker-1",
        "nvidia-dcgm-exporter-h100-0000", "nvidia-device-plugin-daemonset-h100-0000",
    }  # fmt: skip
    rank = by_name["train-worker-1"]
    assert owner_kind(rank) == "PyTorchJob"
    resources = present(spec(rank).containers[0].resources, "container resources")
    assert present(resources.limits, "resource limits")["nvidia.com/gpu"] == "4"
    assert labels_of(rank)["training.kubeflow.org/replica-index"] == "1"
    assert owner_kind(by_name["nvidia-dcgm-exporter-h100-0000"]) == "DaemonSet"
    serve = v1.list_namespaced_pod("serving", label_selector="app in (serve),!missing")
    assert [owner_kind(p) for p in serve.items] == ["ReplicaSet"] * 2
    one = v1.list_namespaced_pod("ml", field_selector="metadata.name=big-worker-0")
    assert [spec(p).node_name for p in one.items] == ["h100-0002"]
    assert name_of(v1.read_node("h100-0003")) == "h100-0003"
    pdbs = client.PolicyV1Api(api).list_namespaced_pod_disruption_budget("ml").items
    assert {(name_of(b), status(b).disruptions_allowed) for b in pdbs} == {
        ("train", 1),
        ("big", 1),
    }


def test_paging_with_limit_and_continue(api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    everything = [name_of(p) for p in v1.list_pod_for_all_namespaces().items]
    names: list[str] = []
    token = None
    while True:
        page = v1.list_pod_for_all_namespaces(limit=3, _continue=token)
        names += [name_of(p) for p in page.items]
        token = meta(page)._continue
        if not token:
            break
        assert present(meta(page).remaining_item_count, "remainingItemCount") > 0
    assert names == everything and len(names) == 13


def test_watch_sees_cordon_patch(api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    rv = meta(v1.list_node()).resource_version
    seen: list[tuple[str, str, Any]] = []

    def run() -> None:
        w = watch.Watch()
        for e in w.stream(v1.list_node, resource_version=rv, timeout_seconds=10):
            seen.append((e["type"], e["object"].metadata.name, e["object"].spec.unschedulable))
            if e["object"].spec.unschedulable:
                w.stop()

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.3)
    v1.patch_node("h100-0001", {"spec": {"unschedulable": True}})
    t.join(timeout=15)
    assert seen == [("MODIFIED", "h100-0001", True)]


def test_watch_initial_state_and_bookmarks(sim: Sim) -> None:
    query = "watch=true&allowWatchBookmarks=true&timeoutSeconds=1"
    url = f"{sim.api.url}/api/v1/namespaces/ml/pods?{query}"
    auth = {"Authorization": f"Bearer {sim.api.admin_token}"}
    with urllib.request.urlopen(urllib.request.Request(url, headers=auth), timeout=10) as resp:
        events = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    added = [e["object"]["metadata"]["name"] for e in events if e["type"] == "ADDED"]
    assert added == ["big-worker-0", "train-worker-0", "train-worker-1"]
    assert any(e["type"] == "BOOKMARK" for e in events)


def test_watch_from_expired_version_gets_410(sim: Sim, api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    rv = present(meta(v1.list_node()).resource_version, "resourceVersion")
    sim.cluster.store.compact()
    v1.patch_node("h100-0001", {"metadata": {"labels": {"x": "y"}}})
    with pytest.raises(client.ApiException) as err:
        for _ in watch.Watch().stream(
            v1.list_node, resource_version=str(int(rv) - 1), timeout_seconds=2
        ):
            pass
    assert err.value.status == 410
    # Enough writes also push an old version out of the bounded history (50 events here).
    for i in range(60):
        v1.patch_node("h100-0002", {"metadata": {"annotations": {"n": str(i)}}})
    with pytest.raises(client.ApiException) as err:
        for _ in watch.Watch().stream(v1.list_node, resource_version=rv, timeout_seconds=2):
            pass
    assert err.value.status == 410


def test_injected_429_500_410_and_slowness(sim: Sim, api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    # urllib3 under the client retries a 429 by itself, after sleeping Retry-After seconds.
    rule = sim.api.faults.add(r"^/api/v1/nodes$", 429, count=1, retry_after=1)
    t0 = time.monotonic()
    assert len(v1.list_node().items) == 4
    assert rule.hits == 1 and time.monotonic() - t0 >= 1.0
    # Without urllib3 retries the client sees the 429 itself.
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(sim.kubeconfig), client_configuration=cfg)
    cfg.retries = 0
    with client.ApiClient(cfg) as bare:
        sim.api.faults.add(r"^/api/v1/nodes$", 429, count=1, retry_after=3)
        with pytest.raises(client.ApiException) as err:
            client.CoreV1Api(bare).list_node()
    assert err.value.status == 429
    assert present(err.value.headers, "headers")["Retry-After"] == "3"
    assert json.loads(present(err.value.body, "body"))["reason"] == "TooManyRequests"
    assert len(v1.list_node().items) == 4  # only the next request failed
    # Through the HTTP control endpoint, as a test in another process would do it.
    posted = {"path": "/api/v1/pods", "status": 500, "count": 2, "method": "GET"}
    req = urllib.request.Request(
        f"{sim.api.url}/_sim/faults", data=json.dumps(posted).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    urllib.request.urlopen(req, timeout=5).close()
    for _ in range(2):
        with pytest.raises(client.ApiException) as err:
            v1.list_pod_for_all_namespaces()
        assert err.value.status == 500
    assert v1.list_pod_for_all_namespaces().items
    sim.api.faults.add("/api/v1/namespaces/ml/pods", 410, count=1, query="watch=true")
    with pytest.raises(client.ApiException) as err:
        for _ in watch.Watch().stream(v1.list_namespaced_pod, "ml", timeout_seconds=1):
            pass
    assert err.value.status == 410
    sim.api.faults.add(r"^/api/v1/nodes/h100-0000$", 0, count=1, delay=0.4)
    t0 = time.monotonic()
    v1.read_node("h100-0000")
    assert time.monotonic() - t0 >= 0.4


def test_eviction_honours_pdb_dry_run_and_404(sim: Sim, api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    uid0 = meta(v1.read_namespaced_pod("train-worker-0", "ml")).uid
    v1.create_namespaced_pod_eviction(
        "train-worker-0", "ml", eviction("train-worker-0", "ml", True)
    )
    assert meta(v1.read_namespaced_pod("train-worker-0", "ml")).uid == uid0  # dry run
    v1.create_namespaced_pod_eviction("train-worker-0", "ml", eviction("train-worker-0", "ml"))
    fresh = v1.read_namespaced_pod("train-worker-0", "ml")
    assert meta(fresh).uid != uid0 and status(fresh).phase == "Pending"
    with pytest.raises(client.ApiException) as err:
        v1.create_namespaced_pod_eviction("train-worker-1", "ml", eviction("train-worker-1", "ml"))
    assert err.value.status == 429
    body = json.loads(present(err.value.body, "body"))
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    pdb = client.PolicyV1Api(api).read_namespaced_pod_disruption_budget("train", "ml")
    assert status(pdb).disruptions_allowed == 0 and status(pdb).current_healthy == 1
    sim.advance(31)  # the replacement becomes Ready; the budget allows one disruption again
    assert status(v1.read_namespaced_pod("train-worker-0", "ml")).phase == "Running"
    v1.create_namespaced_pod_eviction("train-worker-1", "ml", eviction("train-worker-1", "ml"))
    with pytest.raises(client.ApiException) as err:
        v1.create_namespaced_pod_eviction("nope", "ml", eviction("nope", "ml"))
    assert err.value.status == 404
    # The metric engine sees the move: the old placement ended, the new one runs elsewhere.
    sim.advance(31)
    placements = [p for p in sim.cluster.pods_for_metrics() if p.name == "train-worker-0"]
    assert [p.end is not None for p in placements] == [True, False]


def test_delete_with_stale_uid_precondition_conflicts(api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    opts = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="not-the-uid"))
    with pytest.raises(client.ApiException) as err:
        v1.delete_namespaced_pod("serve-0", "serving", body=opts)
    assert err.value.status == 409
    v1.delete_namespaced_pod("serve-0", "serving")
    names = [name_of(p) for p in v1.list_namespaced_pod("serving").items]
    assert "serve-0" not in names and len(names) == 2  # the ReplicaSet made a new one


def test_eviction_of_a_replaced_pod_conflicts_on_uid(sim: Sim, api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    old_uid = meta(v1.read_namespaced_pod("train-worker-0", "ml")).uid
    v1.create_namespaced_pod_eviction("train-worker-0", "ml", eviction("train-worker-0", "ml"))
    sim.advance(31)  # the job controller's replacement, same name, new UID, is Ready
    stale = eviction("train-worker-0", "ml")
    stale.delete_options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=old_uid))
    with pytest.raises(client.ApiException) as err:
        v1.create_namespaced_pod_eviction("train-worker-0", "ml", stale)
    assert err.value.status == 409
    assert status(v1.read_namespaced_pod("train-worker-0", "ml")).phase == "Running"


def test_node_patches_taints_labels_and_json_patch(api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    taint = {"key": "gpufleet.io/quarantine", "value": "xid48", "effect": "NoSchedule"}
    body = {"spec": {"taints": [taint]}, "metadata": {"labels": {"gpufleet.io/quarantined": "true"},
            "annotations": {"gpufleet.io/reason": "xid48"}}}  # fmt: skip
    node = v1.patch_node("h100-0003", body)
    assert present(spec(node).taints, "taints")[0].key == "gpufleet.io/quarantine"
    assert labels_of(node)["gpufleet.io/quarantined"] == "true"
    node = v1.patch_node("h100-0003", [{"op": "remove", "path": "/spec/taints"}])
    assert spec(node).taints is None
    node = v1.patch_node("h100-0003", {"metadata": {"labels": {"gpufleet.io/quarantined": None}}})
    assert "gpufleet.io/quarantined" not in labels_of(node)


def test_leases_for_leader_election(api: client.ApiClient) -> None:
    co = client.CoordinationV1Api(api)
    now = dt.datetime.now(dt.UTC)
    held = client.V1LeaseSpec(holder_identity="a", lease_duration_seconds=15, acquire_time=now,
                              renew_time=now, lease_transitions=0)  # fmt: skip
    lease = client.V1Lease(metadata=client.V1ObjectMeta(name="gpufleet-leader"), spec=held)
    made = co.create_namespaced_lease("default", lease)
    assert spec(made).holder_identity == "a"
    with pytest.raises(client.ApiException) as err:
        co.create_namespaced_lease("default", lease)
    assert err.value.status == 409
    spec(made).holder_identity = "b"
    replaced = co.replace_namespaced_lease("gpufleet-leader", "default", made)
    assert spec(replaced).holder_identity == "b"
    assert int(present(meta(replaced).resource_version, "resourceVersion")) > int(
        present(meta(made).resource_version, "resourceVersion")
    )
    with pytest.raises(client.ApiException) as err:  # stale resourceVersion: someone else won
        co.replace_namespaced_lease("gpufleet-leader", "default", made)
    assert err.value.status == 409
    patched = co.patch_namespaced_lease(
        "gpufleet-leader", "default", {"spec": {"leaseTransitions": 1}}
    )
    assert spec(patched).lease_transitions == 1
    assert spec(co.read_namespaced_lease("gpufleet-leader", "default")).holder_identity == "b"
    co.delete_namespaced_lease("gpufleet-leader", "default")
    with pytest.raises(client.ApiException) as err:
        co.read_namespaced_lease("gpufleet-leader", "default")
    assert err.value.status == 404


def test_events_create_list_and_cluster_events(api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    ref = client.V1ObjectReference(kind="Node", name="h100-0001", api_version="v1")
    ev = client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name="gpufleet-"), involved_object=ref,
        reason="GpufleetCordon", message="cordoned by gpufleet", type="Normal",
    )  # fmt: skip
    made = v1.create_namespaced_event("default", ev)
    assert name_of(made).startswith("gpufleet-")
    v1.patch_node("h100-0001", {"spec": {"unschedulable": True}})
    reasons = {e.reason for e in v1.list_event_for_all_namespaces().items}
    assert {"GpufleetCordon", "NodeNotSchedulable"} <= reasons
    selected = v1.list_namespaced_event("default", field_selector="involvedObject.name=h100-0001")
    assert len(selected.items) == 2


def test_gpu_fault_makes_device_plugin_drop_allocatable(tmp_path: Path) -> None:
    fault = {"kind": "xid79_fallen_off_bus", "node": "h100-0003", "gpu": 0, "start": "5m"}
    with running_sim(tmp_path, faults=[fault]) as sim:
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(sim.kubeconfig), client_configuration=cfg)
        with client.ApiClient(cfg) as api:
            v1 = client.CoreV1Api(api)
            before = present(status(v1.read_node("h100-0003")).allocatable, "allocatable")
            assert before["nvidia.com/gpu"] == "8"
            sim.advance(6 * 60)
            node = v1.read_node("h100-0003")
            assert present(status(node).allocatable, "allocatable")["nvidia.com/gpu"] == "7"
            assert present(status(node).capacity, "capacity")["nvidia.com/gpu"] == "8"
            warnings = v1.list_event_for_all_namespaces(field_selector="type=Warning").items
            assert [(e.reason, e.involved_object.name) for e in warnings] == [
                ("GpuUnhealthy", "h100-0003")
            ]
            assert "XID 79" in present(warnings[0].message, "event message")
            # `big` needs 8 GPUs: h100-0003 has only 7 healthy ones, h100-0002 is cordoned.
            v1.patch_node("h100-0002", {"spec": {"unschedulable": True}})
            v1.create_namespaced_pod_eviction("big-worker-0", "ml", eviction("big-worker-0", "ml"))
            pod = v1.read_namespaced_pod("big-worker-0", "ml")
            assert spec(pod).node_name is None
            unscheduled = present(status(pod).conditions, "pod conditions")[0]
            assert "Insufficient nvidia.com/gpu" in present(unscheduled.message, "message")


def test_no_execute_taint_moves_pods_off(sim: Sim, api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    taint = {"key": "gpufleet.io/quarantine", "value": "xid79", "effect": "NoExecute"}
    old_uid = meta(v1.read_namespaced_pod("big-worker-0", "ml")).uid
    v1.patch_node("h100-0002", {"spec": {"taints": [taint]}})
    pod = v1.read_namespaced_pod("big-worker-0", "ml")
    assert meta(pod).uid != old_uid and spec(pod).node_name == "h100-0003"
    left = {name_of(p) for p in v1.list_pod_for_all_namespaces(
        field_selector="spec.nodeName=h100-0002").items}  # fmt: skip
    assert left == {"nvidia-dcgm-exporter-h100-0002", "nvidia-device-plugin-daemonset-h100-0002"}


def test_namespaces_and_paging_across_similar_names(api: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api)
    assert "gpufleet" in {name_of(n) for n in v1.list_namespace().items}
    v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="ml-prod")))
    assert status(v1.read_namespace("ml-prod")).phase == "Active"
    ref = client.V1ObjectReference(kind="Node", name="h100-0000")
    for ns in ("ml", "ml-prod"):
        for i in range(3):
            ev_meta = client.V1ObjectMeta(name=f"e{i}")
            v1.create_namespaced_event(
                ns, client.CoreV1Event(metadata=ev_meta, involved_object=ref)
            )
    with pytest.raises(client.ApiException) as err:
        v1.create_namespaced_event(
            "nope", client.CoreV1Event(metadata=ev_meta, involved_object=ref)
        )
    assert err.value.status == 404
    everything = [namespaced_name(e) for e in v1.list_event_for_all_namespaces().items]
    paged: list[tuple[str, str]] = []
    token = None
    while True:
        page = v1.list_event_for_all_namespaces(limit=2, _continue=token)
        paged += [namespaced_name(e) for e in page.items]
        token = meta(page)._continue
        if not token:
            break
    assert paged == everything


def test_injected_connection_drop(sim: Sim, api: client.ApiClient) -> None:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(sim.kubeconfig), client_configuration=cfg)
    cfg.retries = 0
    sim.api.faults.add(r"^/api/v1/nodes$", -1, count=1)
    with client.ApiClient(cfg) as bare:
        v1 = client.CoreV1Api(bare)
        with pytest.raises(Exception) as err:
            v1.list_node()
        assert not isinstance(err.value, client.ApiException)
        assert len(v1.list_node().items) == 4


def test_terminating_pods_linger_for_the_grace_period(tmp_path: Path) -> None:
    with running_sim(tmp_path, termination=10.0) as sim:
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(sim.kubeconfig), client_configuration=cfg)
        with client.ApiClient(cfg) as api:
            v1 = client.CoreV1Api(api)
            uid = meta(v1.read_namespaced_pod("big-worker-0", "ml")).uid
            v1.create_namespaced_pod_eviction("big-worker-0", "ml", eviction("big-worker-0", "ml"))
            pod = v1.read_namespaced_pod("big-worker-0", "ml")
            assert meta(pod).uid == uid and meta(pod).deletion_timestamp is not None
            assert spec(pod).node_name == "h100-0002"
            pdb = client.PolicyV1Api(api).read_namespaced_pod_disruption_budget("big", "ml")
            assert status(pdb).current_healthy == 0
            # Evicting a pod that is already terminating succeeds without a second deletion.
            v1.create_namespaced_pod_eviction("big-worker-0", "ml", eviction("big-worker-0", "ml"))
            sim.advance(11)
            fresh = v1.read_namespaced_pod("big-worker-0", "ml")
            assert meta(fresh).uid != uid and meta(fresh).deletion_timestamp is None
            # gracePeriodSeconds=0 (kubectl delete --force --grace-period=0) removes at once.
            v1.delete_namespaced_pod("serve-0", "serving", grace_period_seconds=0)
            names = {name_of(p) for p in v1.list_namespaced_pod("serving").items}
            assert "serve-0" not in names and len(names) == 2


CANDIDATE = """
import sys
from kubernetes import config
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

config.load_kube_config(config_file=sys.argv[2])
name = sys.argv[1]
cfg = electionconfig.Config(
    LeaseLock("gpufleet-leader", "gpufleet", name),
    lease_duration=4, renew_deadline=3, retry_period=1,
    onstarted_leading=lambda: print("LEADING", name, flush=True),
    onstopped_leading=lambda: print("STOPPED", name, flush=True),
)
leaderelection.LeaderElection(cfg).run()
"""


def test_client_leader_election_with_lease_lock(sim: Sim, tmp_path: Path) -> None:
    """The kubernetes client's own LeaseLock elects one leader; the other stays a follower."""
    script = tmp_path / "candidate.py"
    script.write_text(CANDIDATE)
    procs = {}
    try:
        for name in ("a", "b"):
            procs[name] = subprocess.Popen(
                [sys.executable, str(script), name, str(sim.kubeconfig)],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            )  # fmt: skip
            if name == "a":
                assert procs["a"].stdout is not None
                assert procs["a"].stdout.readline().strip() == "LEADING a"
        time.sleep(2.5)  # a renews every second, so b stays a follower
        co = client.CoordinationV1Api(client.ApiClient(_config(sim)))
        lease = co.read_namespaced_lease("gpufleet-leader", "gpufleet")
        assert spec(lease).holder_identity == "a"
        assert procs["b"].poll() is None
        procs["a"].kill()  # the leader dies without releasing: b takes over once the lease expires
        out_b = procs["b"].stdout
        assert out_b is not None
        ready, _, _ = select.select([out_b], [], [], 15)
        assert ready and out_b.readline().strip() == "LEADING b"
        lease = co.read_namespaced_lease("gpufleet-leader", "gpufleet")
        assert spec(lease).holder_identity == "b"
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


def _config(sim: Sim) -> client.Configuration:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(sim.kubeconfig), client_configuration=cfg)
    return cfg


def test_late_workload_starts_where_the_layout_put_it(tmp_path: Path) -> None:
    late = {"name": "late", "kind": "training", "namespace": "ml", "pool": "h100",
            "replicas": 1, "gpus_per_pod": 4, "start": "10m"}  # fmt: skip
    serve_more = {"name": "filler", "kind": "inference", "namespace": "serving", "pool": "h100",
                  "replicas": 1, "gpus_per_pod": 4, "start": "5m"}  # fmt: skip
    with running_sim(tmp_path, workloads=[*KUBE_FLEET["workloads"], late, serve_more]) as sim:
        layout = {p.name: (p.node, p.gpu_indices) for p in sim.cluster.layout.pods}
        assert sim.cluster.store.get("pods", "ml", "late-worker-0") is None
        sim.advance(11 * 60)
        placed = {p.name: (p.node, p.gpu_indices) for p in sim.cluster.running_pods()}
        assert placed["late-worker-0"] == layout["late-worker-0"]
        assert placed["filler-0"] == layout["filler-0"]
