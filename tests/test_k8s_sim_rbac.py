"""The simulated API server authenticates and authorises like a real one: bearer tokens, RBAC from
deploy/, SelfSubjectAccessReview, `kubectl auth can-i`, and the actuator as gpufleet's
ServiceAccount failing where deploy/ lacks a permission."""

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

from errors import PermanentError
from harness.k8s_sim import Sim, deploy_rbac, present, running_sim, status
from kube.actuator import KubeActuator
from remediations.capabilities import WriteContext
from remediations.types import Intent

SA_USER = "system:serviceaccount:gpufleet:gpufleet"
KUBECTL = Path(sys.executable).parent / "kubectl"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    with running_sim(tmp_path_factory.mktemp("rbac")) as s:
        yield s


def _client(kubeconfig: Path) -> client.ApiClient:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    cfg.retries = 0
    return client.ApiClient(cfg)


def _can(
    api: client.ApiClient,
    verb: str,
    resource: str,
    *,
    group: str = "",
    subresource: str = "",
    namespace: str = "",
    name: str = "",
) -> client.V1SubjectAccessReviewStatus:
    attrs = client.V1ResourceAttributes(
        verb=verb, resource=resource, group=group, subresource=subresource,
        namespace=namespace, name=name,
    )  # fmt: skip
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=attrs)
    )
    out = client.AuthorizationV1Api(api).create_self_subject_access_review(review)
    return status(out)


def test_access_review_answers_from_the_deploy_rbac(sim: Sim) -> None:
    with _client(sim.sa_kubeconfig) as sa:
        allowed = _can(sa, verb="patch", resource="nodes", name="h100-0000")
        assert allowed.allowed
        assert allowed.reason == (
            'RBAC: allowed by ClusterRoleBinding "gpufleet" of ClusterRole "gpufleet" '
            'to ServiceAccount "gpufleet/gpufleet"'
        )
        evict = _can(sa, verb="create", resource="pods", subresource="eviction", namespace="ml")
        assert evict.allowed
        assert _can(sa, verb="update", group="coordination.k8s.io", resource="leases",
                    namespace="gpufleet").allowed  # fmt: skip
        # Jobs only in gpufleet's Job namespace; nodes are never deleted nor updated
        jobs = {"verb": "create", "group": "batch", "resource": "jobs"}
        assert _can(sa, **jobs, namespace="gpufleet-jobs").allowed
        assert not _can(sa, **jobs, namespace="ml").allowed
        assert not _can(sa, **jobs, namespace="gpufleet").allowed
        assert not _can(sa, verb="delete", resource="nodes").allowed
        assert not _can(sa, verb="update", resource="nodes", subresource="status").allowed
    with _client(sim.kubeconfig) as admin:
        assert _can(admin, verb="delete", resource="nodes").allowed


def test_requests_are_authenticated_and_authorised(sim: Sim) -> None:
    with _client(sim.sa_kubeconfig) as sa:
        core = client.CoreV1Api(sa)
        assert len(core.list_node().items) == 4
        with pytest.raises(client.ApiException) as err:
            core.delete_node("h100-0003")
        assert err.value.status == 403
        body = json.loads(present(err.value.body, "body"))
        assert body["reason"] == "Forbidden"
        assert body["message"] == (
            f'nodes "h100-0003" is forbidden: User "{SA_USER}" cannot delete resource "nodes" '
            'in API group "" at the cluster scope'
        )
        assert body["details"] == {"name": "h100-0003", "kind": "nodes"}
        with pytest.raises(client.ApiException) as err:
            client.BatchV1Api(sa).list_namespaced_job("ml")
        assert json.loads(present(err.value.body, "body"))["message"] == (
            f'jobs.batch is forbidden: User "{SA_USER}" cannot list resource "jobs" '
            'in API group "batch" in the namespace "ml"'
        )
    assert sim.cluster.store.get("nodes", "", "h100-0003") is not None

    def get(path: str, token: str | None) -> int:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        req = urllib.request.Request(sim.api.url + path, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return e.code

    assert get("/api/v1/pods", "not-a-token") == 401
    assert get("/api/v1/pods", None) == 403  # system:anonymous
    assert get("/version", None) == 200 and get("/apis", None) == 403
    assert get("/apis", sim.api.service_account_token("ml", "default")) == 200
    assert get("/api/v1/pods", sim.api.service_account_token("ml", "default")) == 403


def test_review_without_attributes_is_invalid(sim: Sim) -> None:
    with _client(sim.sa_kubeconfig) as sa:
        review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec())
        with pytest.raises(client.ApiException) as err:
            client.AuthorizationV1Api(sa).create_self_subject_access_review(review)
    assert err.value.status == 422
    assert json.loads(present(err.value.body, "body"))["reason"] == "Invalid"


def _kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = str(KUBECTL) if KUBECTL.exists() else shutil.which("kubectl") or "kubectl"
    return subprocess.run(
        [exe, "--kubeconfig", str(kubeconfig), *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.kubectl
def test_kubectl_auth_can_i(sim: Sim) -> None:
    yes = _kubectl(sim.sa_kubeconfig, "auth", "can-i", "patch", "nodes")
    assert (yes.returncode, yes.stdout.strip()) == (0, "yes"), yes.stderr
    no = _kubectl(sim.sa_kubeconfig, "auth", "can-i", "delete", "nodes")
    assert (no.returncode, no.stdout.strip()) == (1, "no"), no.stderr
    jobs = _kubectl(sim.sa_kubeconfig, "auth", "can-i", "create", "jobs", "-n", "gpufleet-jobs")
    assert jobs.stdout.strip() == "yes", jobs.stderr
    # the admin asks on gpufleet's behalf, as an operator checks an install
    as_sa = _kubectl(sim.kubeconfig, "auth", "can-i", "create", "pods", "--subresource=eviction",
                     "-n", "ml",
                     f"--as={SA_USER}")  # fmt: skip
    assert as_sa.stdout.strip() == "yes", as_sa.stderr
    as_sa = _kubectl(sim.kubeconfig, "auth", "can-i", "delete", "nodes", f"--as={SA_USER}")
    assert as_sa.stdout.strip() == "no", as_sa.stderr
    listed = _kubectl(sim.sa_kubeconfig, "auth", "can-i", "--list", "-n", "gpufleet")
    assert listed.returncode == 0, listed.stderr
    assert any(
        line.split()[:1] == ["leases.coordination.k8s.io"] for line in listed.stdout.splitlines()
    ), listed.stdout


def _node(sim: Sim, name: str) -> dict[str, Any]:
    return present(sim.cluster.store.get("nodes", "", name), f"node {name}")


def _ctx() -> WriteContext:
    return WriteContext(action_id="a1", incident_id="i1", playbook="cordon", reason="test")


def test_a_permission_missing_from_deploy_fails_the_actuator(sim: Sim) -> None:
    """gpufleet's actuator runs as its ServiceAccount: with `patch nodes` gone from the rendered
    RBAC its cordon is refused (403, a permanent error a person must fix), as on a real cluster;
    with deploy/ as it is, the same write goes through."""
    act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig)
    full = sim.api.rbac
    try:
        sim.api.rbac = deploy_rbac().without("", "nodes", "patch")
        with pytest.raises(PermanentError, match="403"):
            act.apply(Intent("cordon", "h100-0003"), _ctx())
        assert not _node(sim, "h100-0003")["spec"].get("unschedulable")
        sim.api.rbac = full
        act.apply(Intent("cordon", "h100-0003"), _ctx())
        assert _node(sim, "h100-0003")["spec"]["unschedulable"]
    finally:
        sim.api.rbac = full
        act.close()
