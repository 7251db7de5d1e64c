"""ResourceSlices and ResourceClaims at every `resource.k8s.io` version the release serves, and
gpufleet reading the one served: v1 wherever it is (1.34+), a beta only where the cluster serves
nothing newer (the runtime-config switched v1 off), with v1beta1's devices under `basic`. Through
the real `kubernetes` client, per profile."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from harness.k8s_sim import running_sim
from kube.actuator import KubeActuator
from remediations.cluster_names import fence_rule_name
from remediations.store import Store
from remediations.types import ActionState
from tests.remediations.helpers import live_policy
from tests.remediations.test_fence_gpu_sim import BAD, NODE, _rules, _run, xid48

RELEASES = ("1.34", "1.35", "1.36", "1.37")
APIS: dict[str, Callable[[client.ApiClient], Any]] = {
    "v1": client.ResourceV1Api,
    "v1beta2": client.ResourceV1beta2Api,
    "v1beta1": client.ResourceV1beta1Api,
}


def _uuid_of(device: Any) -> str:
    attrs = device.basic.attributes if getattr(device, "basic", None) else device.attributes
    return str(attrs["uuid"].string)


@pytest.mark.parametrize("release", RELEASES)
def test_every_served_version_lists_the_same_slices_and_gpufleet_reads_v1(
    tmp_path: Path, release: str
) -> None:
    served = ["v1", "v1beta2", "v1beta1"]
    with running_sim(tmp_path, kubernetes_version=release, dra_api_versions=served) as sim:
        act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig)
        try:
            group = client.ResourceApi(act.api).get_api_group()
            assert [v.version for v in group.versions][:3] == served  # v1 preferred
            seen = {}
            for version in served:
                got = APIS[version](act.api).list_resource_slice(
                    field_selector=f"spec.nodeName={NODE}"
                )
                (s,) = got.items
                assert s.api_version == f"resource.k8s.io/{version}"
                seen[version] = [(d.name, _uuid_of(d)) for d in s.spec.devices]
            assert seen["v1"] == seen["v1beta2"] == seen["v1beta1"]
            assert act.dra.slice_version() == "v1"
            found = act.dra.find_device(NODE, BAD)
            assert found is not None and found.device == "gpu-2"
        finally:
            act.close()


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("version", ["v1beta2", "v1beta1"])
def test_where_only_a_beta_is_served_gpufleet_reads_it(
    tmp_path: Path, release: str, version: str
) -> None:
    with running_sim(tmp_path, kubernetes_version=release, dra_api_versions=[version]) as sim:
        act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig)
        try:
            with pytest.raises(client.ApiException) as gone:
                client.ResourceV1Api(act.api).list_resource_slice()
            assert gone.value.status == 404
            assert act.dra.slice_version() == version
            found = act.dra.find_device(NODE, BAD)
            assert found is not None and (found.pool, found.device) == (NODE, "gpu-2")
            info = act.dra.device_info(found.driver, NODE, "gpu-2")
            assert info is not None and info[:2] == (NODE, 2) and info[2] == BAD
            holders = act.dra.device_holders()
            assert holders is not None and any(k[1] == NODE for k in holders)
        finally:
            act.close()


def test_a_fence_on_a_beta_only_cluster_finds_the_gpu_through_the_served_slices(
    tmp_path: Path, store: Store
) -> None:
    with running_sim(
        tmp_path, history=5000, kubernetes_version="1.37", dra_api_versions=["v1beta1"]
    ) as sim:
        act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig)
        try:
            (a,) = _run(live_policy(_rules()), store, act, sim, xid48())
            assert a.state is ActionState.DONE, a
            rule = APIS["v1"](act.api).read_device_taint_rule(fence_rule_name(BAD))
            assert rule.spec.device_selector.device == "gpu-2"
            assert set(sim.cluster.device_taints) == {(NODE, 2)}
        finally:
            act.close()
