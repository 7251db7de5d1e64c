"""The doctor's Kubernetes checks: the API reachable (and which cluster it is), every verb the
service and the policy's playbooks need granted per SelfSubjectAccessReview, the Lease writable
when leader election is on, and whether DeviceTaintRules are served (single-GPU fencing)."""

from __future__ import annotations

from errors import GpufleetError
from gpufleet.config import GpufleetConfig
from gpufleet.doctor.check_table import FAIL, OK, WARN, Check
from gpufleet.doctor.kube_access import Access, AccessUnknown, KubeAccess
from kube.identity import cluster_uid
from kube.jobs import api_client
from remediations.policy import Policy
from remediations.types import DEVICE_TAINTS_NOT_SERVED

READS = (
    Access("", "nodes", "list"),
    Access("", "nodes", "watch"),
    Access("", "pods", "list"),
    Access("", "pods", "watch"),
    Access("", "events", "list"),
    Access("", "namespaces", "get"),
)
"""What the collector and the cluster check need: without them the service cannot run."""
PLAYBOOK_VERBS: dict[str, tuple[Access, ...]] = {
    "cordon": (Access("", "nodes", "patch"),),
    "uncordon": (Access("", "nodes", "patch"),),
    "quarantine": (Access("", "nodes", "patch"),),
    "drain": (
        Access("", "nodes", "patch"),
        Access("", "pods/eviction", "create"),
        Access("", "events", "create"),
    ),
    "migrate": (Access("", "pods/eviction", "create"),),
    "evict_gpu_pods": (Access("", "pods/eviction", "create"),),
    "restart_pod": (Access("", "pods", "delete"),),
    "restart_job": (Access("", "pods", "delete"),),
    "fence_gpu": (
        Access("resource.k8s.io", "devicetaintrules", "create"),
        Access("resource.k8s.io", "resourceslices", "list"),
    ),
    "unfence_gpu": (Access("resource.k8s.io", "devicetaintrules", "delete"),),
}
"""Writes each playbook makes (the policy's rules decide which are needed)."""


def kubernetes_checks(cfg: GpufleetConfig, policy: Policy) -> list[Check]:
    try:
        api = api_client(cfg.kubeconfig)
    except Exception as exc:  # no kubeconfig / not in a pod
        return [
            Check(
                "kubernetes api",
                FAIL,
                f"no credentials: {exc}",
                "set kubeconfig: in the config, or run in a pod with a ServiceAccount",
            )
        ]
    access = KubeAccess(api)
    try:
        try:
            uid, server = cluster_uid(api)
        except GpufleetError as exc:
            return [Check("kubernetes api", FAIL, exc.message, exc.hint or "check kubeconfig")]
        out = [Check("kubernetes api", OK, f"{server}: kube-system {uid}")]
        out += _verbs(access, cfg, policy)
        out.append(_dra(access))
        return out
    finally:
        access.close()


def _needed(cfg: GpufleetConfig, policy: Policy) -> list[tuple[Access, bool]]:
    need: list[tuple[Access, bool]] = [(a, True) for a in READS]
    for rule in policy.rules:
        need += [(a, False) for a in PLAYBOOK_VERBS.get(rule.playbook, ())]
    le = cfg.service.leader_election
    if le.enabled:
        need += [
            (Access("coordination.k8s.io", "leases", v, le.namespace), True)
            for v in ("get", "create", "update")
        ]
    seen: dict[Access, bool] = {}
    for a, fatal in need:
        seen[a] = seen.get(a, False) or fatal
    return list(seen.items())


def _verbs(access: KubeAccess, cfg: GpufleetConfig, policy: Policy) -> list[Check]:
    denied_fatal: list[str] = []
    denied: list[str] = []
    needed = _needed(cfg, policy)
    try:
        for a, fatal in needed:
            if not access.allowed(a):
                (denied_fatal if fatal else denied).append(str(a))
    except AccessUnknown as exc:
        return [
            Check(
                "rbac",
                WARN,
                f"SelfSubjectAccessReview not answered ({exc})",
                "check RBAC by hand: kubectl auth can-i --list --as "
                "system:serviceaccount:gpufleet:gpufleet",
            )
        ]
    fix = "apply deploy/base/rbac.yaml (or grant these verbs to gpufleet's ServiceAccount)"
    out = [
        Check(
            "rbac",
            FAIL if denied_fatal else WARN if denied else OK,
            f"denied: {', '.join(denied_fatal + denied)}"
            if denied_fatal or denied
            else f"{len(needed)} verbs granted (SelfSubjectAccessReview)",
            fix,
        )
    ]
    le = cfg.service.leader_election
    if le.enabled:
        lease_denied = [d for d in denied_fatal if "leases" in d]
        out.append(
            Check(
                "lease",
                FAIL if lease_denied else OK,
                f"Lease {le.namespace}/{le.lease_name}: "
                + ("not writable" if lease_denied else "writable"),
                fix,
            )
        )
    return out


def _dra(access: KubeAccess) -> Check:
    """Whether fence_gpu can taint one GPU here: the DeviceTaintRule version served, or why not
    and what happens instead."""
    try:
        version = access.device_taint_version()
    except AccessUnknown as exc:
        return Check("dra", WARN, f"API discovery failed: {exc}", "check the API server")
    if version is not None:
        return Check(
            "dra", OK, f"DeviceTaintRules served at resource.k8s.io/{version} (fence_gpu can "
            "taint one GPU)",
        )  # fmt: skip
    return Check(
        "dra",
        WARN,
        f"{DEVICE_TAINTS_NOT_SERVED}: fence_gpu falls back to the pods-on-GPU grain (cordon "
        "unless the device plugin withdrew the GPU; a NoExecute fence also evicts the GPU's "
        "pods, a NoSchedule one evicts none)",
        "upgrade to Kubernetes 1.37, or enable the DRADeviceTaints gate and runtime-config; or "
        "keep node-level playbooks",
    )
