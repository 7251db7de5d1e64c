"""The simulator's resource.k8s.io/v1 API through the real `kubernetes` client: the NVIDIA DRA
driver's ResourceSlices and DeviceTaintRules that fence, or evict from, single GPUs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from harness.k8s_sim import Sim, meta, name_of, present, running_sim, spec
from simulator.layout import gpu_uuid


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(tmp_path) as s:
        yield s


@pytest.fixture
def api(sim: Sim) -> Iterator[client.ResourceV1Api]:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(sim.kubeconfig), client_configuration=cfg)
    with client.ApiClient(cfg) as c:
        yield client.ResourceV1Api(c)


def rule(name: str, pool: str, device: str | None, effect: str) -> client.V1DeviceTaintRule:
    return client.V1DeviceTaintRule(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeviceTaintRuleSpec(
            device_selector=client.V1DeviceTaintSelector(
                driver="gpu.nvidia.com", pool=pool, device=device
            ),
            taint=client.V1DeviceTaint(key="example.com/broken", value="xid48", effect=effect),
        ),
    )


def gpus_of(sim: Sim, namespace: str, name: str) -> tuple[int, ...]:
    for p in sim.cluster.running_pods():
        if (p.namespace, p.name) == (namespace, name):
            return p.gpu_indices
    return ()


def test_one_slice_per_gpu_node_with_the_exporters_uuids(api: client.ResourceV1Api) -> None:
    slices = api.list_resource_slice().items
    assert [name_of(s) for s in slices] == [f"h100-000{i}-gpu.nvidia.com" for i in range(4)]
    for s in slices:
        sp = spec(s)
        node = present(sp.node_name, "nodeName")
        assert sp.driver == "gpu.nvidia.com" and sp.pool.name == node
        devices = present(sp.devices, "devices")
        assert [d.name for d in devices] == [f"gpu-{i}" for i in range(8)]
        for i, d in enumerate(devices):
            attrs = present(d.attributes, "attributes")
            assert attrs["uuid"].string == gpu_uuid("small", node, i)
            assert attrs["index"].int == i
    one = api.list_resource_slice(field_selector="spec.nodeName=h100-0002").items
    assert [spec(s).node_name for s in one] == ["h100-0002"]
    assert name_of(api.read_resource_slice("h100-0002-gpu.nvidia.com")) == (
        "h100-0002-gpu.nvidia.com"
    )


def test_no_execute_evicts_only_the_pods_on_that_device(
    sim: Sim, api: client.ResourceV1Api
) -> None:
    # serve: 2 pods x 2 GPUs on h100-0001
    on_gpu1 = next(
        p for p in sim.cluster.running_pods() if p.node == "h100-0001" and 1 in p.gpu_indices
    )
    others = {p.key for p in sim.cluster.running_pods() if p.key != on_gpu1.key}
    created = api.create_device_taint_rule(rule("fence-gpu1", "h100-0001", "gpu-1", "NoExecute"))
    assert present(spec(created).taint.time_added, "timeAdded")
    running = {p.key for p in sim.cluster.running_pods()}
    assert on_gpu1.key not in running and others <= running
    assert sim.cluster.device_taints[("h100-0001", 1)]["effect"] == "NoExecute"
    sim.advance(60)  # the replacement starts: on the same node, never on the tainted device
    for p in sim.cluster.running_pods():
        assert not (p.node == "h100-0001" and 1 in p.gpu_indices), p
    fresh = {p.key: p for p in sim.cluster.running_pods()}.keys() - others
    assert len(fresh) == 1
    (new,) = [p for p in sim.cluster.running_pods() if p.key in fresh]
    assert new.node == "h100-0001" and len(new.gpu_indices) == 2  # the other GPUs take new work
    node = sim.cluster.store.get("nodes", "", "h100-0001")
    assert node is not None and not node["spec"].get("unschedulable")


def test_no_schedule_keeps_pods_running_and_none_does_nothing(
    sim: Sim, api: client.ResourceV1Api
) -> None:
    before = {p.key for p in sim.cluster.running_pods()}
    api.create_device_taint_rule(rule("ns", "h100-0000", "gpu-0", "NoSchedule"))
    api.create_device_taint_rule(rule("none", "h100-0003", None, "None"))
    assert {p.key for p in sim.cluster.running_pods()} == before
    assert set(sim.cluster.device_taints) == {("h100-0000", 0)} | {
        ("h100-0003", i) for i in range(8)
    }
    assert ("h100-0000", 0) in sim.cluster.controller.blocked()
    assert not any(n == "h100-0003" for n, _ in sim.cluster.controller.blocked())
    names = [name_of(r) for r in api.list_device_taint_rule().items]
    assert names == ["none", "ns"]
    api.delete_device_taint_rule("ns")
    assert ("h100-0000", 0) not in sim.cluster.controller.blocked()
    with pytest.raises(ApiException) as err:
        api.read_device_taint_rule("ns")
    assert err.value.status == 404


def test_invalid_effect_and_duplicate_are_rejected(api: client.ResourceV1Api) -> None:
    bad = rule("bad", "h100-0000", "gpu-0", "NoSchedule")
    spec(bad).taint.effect = "PreferNoSchedule"  # the client does not check effects
    with pytest.raises(ApiException) as err:
        api.create_device_taint_rule(bad)
    assert err.value.status == 422 and "spec.taint.effect" in str(err.value.body)
    api.create_device_taint_rule(rule("dup", "h100-0000", "gpu-0", "None"))
    with pytest.raises(ApiException) as err:
        api.create_device_taint_rule(rule("dup", "h100-0000", "gpu-0", "None"))
    assert err.value.status == 409


def test_watch_sees_rules_come_and_go(api: client.ResourceV1Api) -> None:
    rv = meta(api.list_device_taint_rule()).resource_version
    api.create_device_taint_rule(rule("w", "h100-0000", "gpu-7", "NoSchedule"))
    api.delete_device_taint_rule("w")
    w = watch.Watch()
    seen = []
    for ev in w.stream(api.list_device_taint_rule, resource_version=rv, timeout_seconds=2):
        seen.append((ev["type"], name_of(ev["object"])))
        if len(seen) == 2:
            w.stop()
    assert seen == [("ADDED", "w"), ("DELETED", "w")]
