"""The simulated API server validates like the real one: 422 Invalid with `details.causes` for
names, labels, taints, Job specs and Lease fields; 400 for an undecodable MicroTime and for a field
selector the resource does not support; the main resource ignores `status`, `/status` ignores
`spec`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from harness.k8s_sim import Sim, present, running_sim, spec, status

KUBECTL = Path(sys.executable).parent / "kubectl"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    with running_sim(tmp_path_factory.mktemp("strict")) as s:
        yield s


@pytest.fixture(scope="module")
def api(sim: Sim) -> Iterator[client.ApiClient]:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(sim.kubeconfig), client_configuration=cfg)
    cfg.retries = 0
    with client.ApiClient(cfg) as a:
        yield a


def _refusal(exc: pytest.ExceptionInfo[client.ApiException]) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(present(exc.value.body, "body"))
    assert body["code"] == exc.value.status
    return body


def _job(name: str, **pod: Any) -> Any:  # a JSON body, which the client sends as it is
    pod_spec = {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}], **pod}
    return {"metadata": {"name": name}, "spec": {"template": {"spec": pod_spec}}}


def test_job_name_and_spec_are_validated(sim: Sim, api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    with pytest.raises(client.ApiException) as err:
        batch.create_namespaced_job(
            "gpufleet", _job("gpufleet-diag-ip-10-0-1-2.us-west-2.compute.-ab")
        )
    body = _refusal(err)
    assert err.value.status == 422 and body["reason"] == "Invalid"
    assert body["details"]["kind"] == "Job" and body["details"]["group"] == "batch"
    assert [c["field"] for c in body["details"]["causes"]] == ["metadata.name"]
    assert body["message"].startswith(
        'Job.batch "gpufleet-diag-ip-10-0-1-2.us-west-2.compute.-ab" is invalid: metadata.name: '
        'Invalid value: "gpufleet-diag-ip-10-0-1-2.us-west-2.compute.-ab": a lowercase RFC 1123 '
        "subdomain"
    )
    # 64 characters: a valid subdomain, but the Job's name labels its pods and a label value
    # holds 63 at most
    with pytest.raises(client.ApiException) as err:
        batch.create_namespaced_job("gpufleet", _job("j" * 64))
    causes = _refusal(err)["details"]["causes"]
    assert {c["field"] for c in causes} == {"spec.template.metadata.labels"}
    assert "must be no more than 63 characters" in causes[0]["message"]
    bad = _job("bad-spec", restartPolicy="Always", containers=[])
    bad["spec"]["backoffLimit"] = -1
    with pytest.raises(client.ApiException) as err:
        batch.create_namespaced_job("gpufleet", bad)
    causes = _refusal(err)["details"]["causes"]
    assert {(c["field"], c["reason"]) for c in causes} == {
        ("spec.backoffLimit", "FieldValueInvalid"),
        ("spec.template.spec.restartPolicy", "FieldValueNotSupported"),
        ("spec.template.spec.containers", "FieldValueRequired"),
    }
    assert batch.create_namespaced_job("gpufleet", _job("good.name-1"))
    assert sim.cluster.store.get("jobs", "gpufleet", "bad-spec") is None


def test_labels_taints_and_namespace_names(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    too_long = {"metadata": {"labels": {"gpufleet.io/node": "n" * 64}}}
    with pytest.raises(client.ApiException) as err:
        core.patch_node("h100-0000", too_long)
    assert err.value.status == 422
    (cause,) = _refusal(err)["details"]["causes"]
    assert cause["field"] == "metadata.labels"
    assert cause["message"].startswith(f'Invalid value: "{"n" * 64}": must be no more than 63')
    with pytest.raises(client.ApiException) as err:
        core.patch_node("h100-0000", {"metadata": {"labels": {"a/b/c": "x"}}})
    assert err.value.status == 422
    taint = {"key": "gpufleet.io/quarantine", "value": "x", "effect": "NoScheduleNow"}
    with pytest.raises(client.ApiException) as err:
        core.patch_node("h100-0000", {"spec": {"taints": [taint]}})
    (cause,) = _refusal(err)["details"]["causes"]
    assert cause == {
        "reason": "FieldValueNotSupported",
        "field": "spec.taints[0].effect",
        "message": 'Unsupported value: "NoScheduleNow": supported values: "NoSchedule", '
        '"PreferNoSchedule", "NoExecute"',
    }
    assert not spec(core.read_node("h100-0000")).taints
    with pytest.raises(client.ApiException) as err:
        namespace: Any = {"metadata": {"name": "has.dot"}}
        core.create_namespace(namespace)  # a namespace's name is a DNS-1123 label
    assert err.value.status == 422


def test_lease_fields_and_micro_time(sim: Sim, api: client.ApiClient) -> None:
    coord = client.CoordinationV1Api(api)

    def lease(name: str, **spec: Any) -> Any:
        return {"metadata": {"name": name}, "spec": {"holderIdentity": "a", **spec}}

    with pytest.raises(client.ApiException) as err:
        coord.create_namespaced_lease("gpufleet", lease("zero", leaseDurationSeconds=0))
    assert err.value.status == 422
    assert _refusal(err)["details"]["causes"][0]["field"] == "spec.leaseDurationSeconds"
    # MicroTime parses only with exactly six fractional digits. Raw requests: the client
    # re-serialises a datetime string it parsed (whole seconds: no fraction at all)
    url = f"{sim.api.url}/apis/coordination.k8s.io/v1/namespaces/gpufleet/leases"
    headers = {"Authorization": f"Bearer {sim.api.admin_token}", "Content-Type": "application/json"}
    for t in ("2026-01-01T00:00:00Z", "2026-01-01T00:00:00.123Z", "2026-01-01T00:00:00+00:00"):
        data = json.dumps(lease("whole", renewTime=t)).encode()
        req = urllib.request.Request(url, data=data, headers=headers, method="POST")
        with pytest.raises(urllib.error.HTTPError) as http:
            urllib.request.urlopen(req, timeout=10)
        assert http.value.code == 400
        assert json.loads(http.value.read())["message"].startswith(
            f'Lease in version "v1" cannot be handled as a Lease: parsing time "{t}"'
        )
    ok = lease("micro", renewTime="2026-01-01T00:00:00.000000Z", leaseDurationSeconds=15)
    req = urllib.request.Request(url, data=json.dumps(ok).encode(), headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 201


def test_status_and_spec_are_written_only_where_they_belong(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    before = status(core.read_node("h100-0001")).conditions
    core.patch_node("h100-0001", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert status(core.read_node("h100-0001")).conditions == before
    core.patch_node_status("h100-0001", {"spec": {"unschedulable": True}})
    assert not spec(core.read_node("h100-0001")).unschedulable


def test_unsupported_field_selectors_are_refused(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    assert core.list_pod_for_all_namespaces(field_selector="spec.nodeName=h100-0000").items
    with pytest.raises(client.ApiException) as err:
        core.list_pod_for_all_namespaces(field_selector="spec.priority=1")
    assert err.value.status == 400
    assert _refusal(err)["message"] == "field label not supported: spec.priority"
    with pytest.raises(client.ApiException) as err:
        core.list_node(field_selector="status.phase=Running")
    assert err.value.status == 400


@pytest.mark.kubectl
def test_kubectl_create_job_with_a_bad_name_is_refused(sim: Sim) -> None:
    exe = str(KUBECTL) if KUBECTL.exists() else shutil.which("kubectl") or "kubectl"
    out = subprocess.run(
        [exe, "--kubeconfig", str(sim.kubeconfig), "-n", "gpufleet", "create", "job",
         "Bad_Name", "--image=x"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode != 0
    assert (
        'Job.batch "Bad_Name" is invalid: [metadata.name: Invalid value: "Bad_Name"' in out.stderr
    )
    assert "spec.template.spec.containers[0].name" in out.stderr  # kubectl names it after the Job
