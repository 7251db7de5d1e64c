"""Version profiles of the simulated API server through the real `kubernetes` client: each
release (`kubernetes_version` 1.34 to 1.37) reports itself on `/version` and serves
DeviceTaintRules only where that release does (v1 from 1.37; v1beta2 from 1.36 and v1alpha3
only behind the DRADeviceTaints gate), while ResourceSlices stay at v1 throughout."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from harness.k8s_sim import present, running_sim, small_scenario

KUBECTL = Path(sys.executable).parent / "kubectl"
RULE_VERSIONS = {
    ("1.34", False): (),
    ("1.35", False): (),
    ("1.36", False): (),
    ("1.37", False): ("v1",),
    ("1.34", True): ("v1alpha3",),
    ("1.35", True): ("v1alpha3",),
    ("1.36", True): ("v1beta2", "v1alpha3"),
    ("1.37", True): ("v1", "v1beta2", "v1alpha3"),
}
"""(release, gate on) -> resource.k8s.io versions that serve DeviceTaintRule, preferred first."""
RULE_APIS: dict[str, Callable[[client.ApiClient], Any]] = {
    "v1": client.ResourceV1Api,
    "v1beta2": client.ResourceV1beta2Api,
    "v1alpha3": client.ResourceV1alpha3Api,
}


@contextmanager
def cluster_api(tmp_path: Path, version: str, gate: bool) -> Iterator[client.ApiClient]:
    with running_sim(tmp_path, kubernetes_version=version, dra_device_taint_gate=gate) as sim:
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(sim.kubeconfig), client_configuration=cfg)
        with client.ApiClient(cfg) as api:
            yield api


def _rule_body(version: str) -> Any:
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "DeviceTaintRule",
        "metadata": {"name": f"probe-{version}"},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "h100-0000", "device": "gpu-0"},
            "taint": {"key": "example.com/broken", "value": "xid48", "effect": "NoSchedule"},
        },
    }


@pytest.mark.parametrize(("version", "gate"), sorted(RULE_VERSIONS))
def test_each_release_serves_its_own_dra_versions(tmp_path: Path, version: str, gate: bool) -> None:
    with cluster_api(tmp_path, version, gate) as api:
        code = client.VersionApi(api).get_code()
        assert (code.major, code.minor) == ("1", version.split(".")[1])
        assert code.git_version.startswith(f"v{version}.")
        groups = {g.name: g for g in client.ApisApi(api).get_api_versions().groups}
        dra = groups["resource.k8s.io"]
        served = [v.version for v in dra.versions]
        assert (
            present(dra.preferred_version, "preferredVersion").version == "v1"
        )  # ResourceSlices and claims: GA from 1.34
        want = RULE_VERSIONS[(version, gate)]
        assert [v for v in served if v != "v1"] == [v for v in want if v != "v1"]
        slices = client.ResourceV1Api(api).list_resource_slice().items
        assert len(slices) == 4
        for v, api_class in RULE_APIS.items():
            rules = api_class(api)
            if v in want:
                rules.create_device_taint_rule(_rule_body(v))
                got = rules.read_device_taint_rule(f"probe-{v}")
                assert got.api_version == f"resource.k8s.io/{v}"
                assert got.spec.taint.effect == "NoSchedule"
            else:
                with pytest.raises(ApiException) as err:
                    rules.list_device_taint_rule()
                assert err.value.status == 404


def test_one_rule_is_seen_at_every_version_served(tmp_path: Path) -> None:
    """One storage behind every version, as on a real server: a rule written at v1beta2 is
    read back at v1alpha3 and v1 with the same uid."""
    with cluster_api(tmp_path, "1.37", True) as api:
        client.ResourceV1beta2Api(api).create_device_taint_rule(_rule_body("v1beta2"))
        uids = {
            v: api_class(api).read_device_taint_rule("probe-v1beta2").metadata.uid
            for v, api_class in RULE_APIS.items()
        }
        assert len(set(uids.values())) == 1


def test_the_release_may_be_written_as_a_yaml_number() -> None:
    sc = small_scenario(**yaml.safe_load("kubernetes_version: 1.35"))
    assert sc.kubernetes_version == "1.35"


def test_an_unknown_release_is_refused(tmp_path: Path) -> None:
    with (
        pytest.raises(Exception, match="kubernetes_version"),
        running_sim(tmp_path, kubernetes_version="1.33"),
    ):
        pass


@pytest.mark.kubectl
@pytest.mark.parametrize(("version", "gate"), [("1.35", False), ("1.36", True), ("1.37", False)])
def test_kubectl_sees_the_release_and_its_dra_resources(
    tmp_path: Path, version: str, gate: bool
) -> None:
    exe = str(KUBECTL) if KUBECTL.exists() else shutil.which("kubectl") or "kubectl"
    with running_sim(tmp_path, kubernetes_version=version, dra_device_taint_gate=gate) as sim:

        def kubectl(*args: str) -> str:
            out = subprocess.run(
                [exe, "--kubeconfig", str(sim.kubeconfig), *args],
                capture_output=True, text=True, timeout=60, check=True,
            )  # fmt: skip
            return out.stdout

        server = json.loads(kubectl("version", "-o", "json"))["serverVersion"]
        assert server["minor"] == version.split(".")[1]
        listed = kubectl("api-resources", "--api-group=resource.k8s.io", "-o", "wide")
        rules = [line.split()[1] for line in listed.splitlines() if "DeviceTaintRule" in line]
        want = [f"resource.k8s.io/{v}" for v in RULE_VERSIONS[(version, gate)][:1]]
        assert rules == want  # kubectl shows each resource at its preferred version
        assert "resourceslices" in listed
