"""The simulator's resource.k8s.io/v1 ResourceClaims through the real `kubernetes` client: on DRA
nodes every pod holding GPUs has a claim allocated exactly those devices and reserved for it,
and the claim goes when the pod goes (as the ResourceClaim controller deletes a template's)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from harness.k8s_sim import Sim, meta, present, running_sim, spec, status


def _api(sim: Sim) -> client.ApiClient:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(sim.kubeconfig), client_configuration=cfg)
    return client.ApiClient(cfg)


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(tmp_path) as s:
        yield s


@pytest.fixture
def api(sim: Sim) -> Iterator[client.ResourceV1Api]:
    with _api(sim) as c:
        yield client.ResourceV1Api(c)


def holdings(api: client.ResourceV1Api) -> dict[str, tuple[str, tuple[str, ...]]]:
    """`namespace/pod` -> (pool, devices) from every claim's allocation and reservation."""
    out = {}
    for c in api.list_resource_claim_for_all_namespaces().items:
        st = status(c)
        devices = present(st.allocation, "allocation").devices
        results = present(present(devices, "devices").results, "results")
        (ref,) = present(st.reserved_for, "reservedFor")
        assert ref.resource == "pods" and ref.uid
        assert {r.driver for r in results} == {"gpu.nvidia.com"} and {r.request for r in results}
        pools = {r.pool for r in results}
        assert len(pools) == 1
        (req,) = present(present(spec(c).devices, "devices").requests, "requests")
        assert present(req.exactly, "exactly").count == len(results)
        out[f"{meta(c).namespace}/{ref.name}"] = (pools.pop(), tuple(r.device for r in results))
    return out


def test_claims_record_each_pods_devices(sim: Sim, api: client.ResourceV1Api) -> None:
    want = {
        p.key: (p.node, tuple(f"gpu-{i}" for i in p.gpu_indices))
        for p in sim.cluster.running_pods()
    }
    assert len(want) == 5 and holdings(api) == want
    serving = api.list_namespaced_resource_claim("serving").items
    assert {meta(c).namespace for c in serving} == {"serving"} and len(serving) == 2
    one = api.read_namespaced_resource_claim(present(meta(serving[0]).name, "name"), "serving")
    owner = present(meta(one).owner_references, "ownerReferences")[0]
    assert owner.kind == "Pod" and owner.controller
    assert present(status(one).reserved_for, "reservedFor")[0].uid == owner.uid


def test_claim_goes_with_its_pod_and_the_replacement_gets_its_own(
    sim: Sim, api: client.ResourceV1Api
) -> None:
    def claims_of(ns: str, pod: str) -> dict[str, str]:
        """claim name -> the pod uid it is reserved for."""
        out = {}
        for c in api.list_namespaced_resource_claim(ns).items:
            ref = present(status(c).reserved_for, "reservedFor")[0]
            if ref.name == pod:
                out[present(meta(c).name, "name")] = ref.uid
        return out

    ns, name = "serving", "serve-0"  # its ReplicaSet replaces it under a new name
    ((old_claim, old_uid),) = claims_of(ns, name).items()
    with _api(sim) as c:
        client.CoreV1Api(c).delete_namespaced_pod(name, ns)
    assert claims_of(ns, name) == {}  # the pod is gone: its claim too
    sim.advance(60)
    _, pods = sim.cluster.store.objects("pods", ns)
    assert [p["metadata"]["name"] for p in pods if p["metadata"]["name"] == name] == []
    mine = {u for p in pods for u in claims_of(ns, p["metadata"]["name"]).values()}
    assert mine == {p["metadata"]["uid"] for p in pods} and old_uid not in mine
    assert old_claim not in {meta(c).name for c in api.list_namespaced_resource_claim(ns).items}


def test_no_claims_api_on_a_device_plugin_cluster(tmp_path: Path) -> None:
    with running_sim(tmp_path, dra=False) as s, _api(s) as c:
        assert client.ResourceV1Api(c).list_resource_claim_for_all_namespaces().items == []
