"""Live reads of the cluster for the engine and the playbooks: nodes, pods, jobs, gpufleet's
DeviceTaintRules and repair Jobs, and the whole cluster as the engine's view.

Every read returns the engine's own view types (NodeView, PodView, JobView), so nothing above
this wing sees a `kubernetes` object. Verification re-reads through here after each write.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from errors import PermanentError
from kube.api_errors import api_error
from kube.dra import DraClient, TaintRuleView
from kube.jobs import JobStatus, KubeNodeJobs
from remediations.capabilities import FencedGpu
from remediations.cluster_names import GPU_COUNT_LABEL, JOB_LABEL_KEYS
from remediations.cluster_view import ClusterView, JobView, NodeView, PodView

log = logging.getLogger(__name__)
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def _job_of(namespace: str, labels: Mapping[str, str], keys: Sequence[str]) -> str | None:
    for key in keys:
        if key in labels:
            return f"{namespace}/{labels[key]}"
    return None


def pod_view(p: Any, job_label_keys: Sequence[str] = JOB_LABEL_KEYS) -> PodView:
    meta, spec = p.metadata, p.spec
    owner = next((o for o in meta.owner_references or () if o.controller), None)
    if owner is None and meta.owner_references:
        owner = meta.owner_references[0]
    labels = dict(meta.labels or {})
    phase = p.status.phase if p.status is not None else "Unknown"
    return PodView(
        namespace=meta.namespace,
        name=meta.name,
        node=spec.node_name,
        uid=meta.uid,
        phase="Terminating" if meta.deletion_timestamp is not None else (phase or "Unknown"),
        labels=labels,
        owner_kind=owner.kind if owner else None,
        owner_name=owner.name if owner else None,
        priority_class=spec.priority_class_name,
        mirror=MIRROR_ANNOTATION in (meta.annotations or {}),
        job=_job_of(meta.namespace, labels, job_label_keys),
        created=meta.creation_timestamp.timestamp() if meta.creation_timestamp else None,
    )


def _count(resources: Mapping[str, Any], name: str) -> int | None:
    v = str(resources.get(name, ""))
    return int(v) if v.isdigit() else None


def node_view(n: Any) -> NodeView:
    meta = n.metadata
    labels = dict(meta.labels or {})
    alloc = (n.status.allocatable or {}) if n.status is not None else {}
    cap = (n.status.capacity or {}) if n.status is not None else {}
    gpus = str(alloc.get("nvidia.com/gpu") or labels.get(GPU_COUNT_LABEL) or "0")
    conds = {c.type: c.status for c in (n.status.conditions or ())} if n.status else {}
    return NodeView(
        name=meta.name,
        labels=labels,
        annotations=dict(meta.annotations or {}),
        taints=tuple((t.key, t.value or "", t.effect) for t in n.spec.taints or ()),
        unschedulable=bool(n.spec.unschedulable),
        gpu_count=int(gpus) if gpus.isdigit() else 0,
        ready=conds.get("Ready", "Unknown") == "True",
        boot_id=(n.status.node_info.boot_id or "") if n.status and n.status.node_info else "",
        gpu_capacity=_count(cap, "nvidia.com/gpu"),
        gpu_allocatable=_count(alloc, "nvidia.com/gpu"),
    )


class KubeReader:
    """ClusterReader, DeviceTaintReader, NodeJobReader, FencedGpuReader and the cluster view,
    over the `kubernetes` client's APIs."""

    def __init__(
        self,
        core: client.CoreV1Api,
        dra: DraClient,
        jobs: KubeNodeJobs,
        *,
        job_label_keys: Sequence[str] = JOB_LABEL_KEYS,
    ) -> None:
        self.core = core
        self.dra = dra
        self.jobs = jobs
        self.job_label_keys = tuple(job_label_keys)

    def node(self, name: str) -> NodeView | None:
        try:
            return node_view(self.core.read_node(name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise api_error(exc, f"read node {name}") from exc

    def existing_node(self, name: str) -> NodeView:
        """The node, which a write or a pin needs to exist (permanent error if it does not)."""
        node = self.node(name)
        if node is None:
            raise PermanentError(f"node {name} does not exist")
        return node

    def nodes(self, what: str) -> list[NodeView]:
        """Every node (`what` says why, for the error)."""
        try:
            return [node_view(n) for n in self.core.list_node().items]
        except (ApiException, HTTPError) as exc:
            raise api_error(exc, what) from exc

    def pods_on_node(self, name: str) -> Sequence[PodView]:
        try:
            pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}")
        except (ApiException, HTTPError) as exc:
            raise api_error(exc, f"list pods on {name}") from exc
        return [pod_view(p, self.job_label_keys) for p in pods.items]

    def pods_selected(self, namespace: str, selector: str) -> Sequence[PodView]:
        try:
            pods = self.core.list_namespaced_pod(namespace, label_selector=selector)
        except (ApiException, HTTPError) as exc:
            raise api_error(exc, f"list pods {namespace} {selector}") from exc
        return [pod_view(p, self.job_label_keys) for p in pods.items]

    def pod(self, namespace: str, name: str) -> PodView | None:
        try:
            return pod_view(self.core.read_namespaced_pod(name, namespace), self.job_label_keys)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise api_error(exc, f"read pod {namespace}/{name}") from exc

    def device_taint_rule(self, name: str) -> TaintRuleView | None:
        """A DeviceTaintRule by name (None: absent), for the fence_gpu playbook's verification."""
        try:
            return self.dra.rule(name)
        except (ApiException, HTTPError) as exc:
            raise api_error(exc, f"read device taint rule {name}") from exc

    def node_job(self, namespace: str, name: str) -> JobStatus | None:
        """A repair Job's outcome (None: no such Job), for reset_gpu's verification; a failed
        one says what its container said (its pod's termination message)."""
        return self.jobs.status(namespace, name)

    def fenced_gpus(self) -> list[FencedGpu]:
        """The GPUs gpufleet's own DeviceTaintRules fence, with node, index and UUID (a rule
        whose device no ResourceSlice publishes any more is left out)."""
        try:
            out = []
            holders: dict[tuple[str, str, str], tuple[str, ...]] | None = None
            for r in self.dra.our_rules():
                if r.driver is None or r.pool is None or r.device is None:
                    continue
                found = self.dra.device_info(r.driver, r.pool, r.device)
                if found is not None:
                    if holders is None:  # one claims list per call, only when something is fenced
                        holders = self.dra.device_holders() or {}
                    node, index, uuid = found
                    out.append(
                        FencedGpu(
                            r.name,
                            node,
                            index,
                            uuid,
                            r.effect,
                            dict(r.labels),
                            dict(r.annotations),
                            holders.get((r.driver, r.pool, r.device), ()),
                        )
                    )
            return out
        except ApiException as exc:
            if exc.status == 404:
                return []  # no resource.k8s.io/v1 DeviceTaintRules here: nothing fenced
            raise api_error(exc, "list gpufleet's device taint rules") from exc
        except HTTPError as exc:
            raise api_error(exc, "list gpufleet's device taint rules") from exc

    def cluster_view(self, taken_at: float = 0.0) -> ClusterView:
        """Nodes, pods and jobs from the live API (jobs by the operators' job-name labels)."""
        try:
            nodes = [node_view(n) for n in self.core.list_node().items]
            pods = [
                pod_view(p, self.job_label_keys)
                for p in self.core.list_pod_for_all_namespaces().items
            ]
        except (ApiException, HTTPError) as exc:
            raise api_error(exc, "list nodes and pods") from exc
        jobs: dict[str, tuple[str, list[str]]] = {}
        for p in pods:
            if p.job is not None:
                key = next(k for k in self.job_label_keys if k in p.labels)
                jobs.setdefault(p.job, (key, []))[1].append(p.key)
        return ClusterView(
            {n.name: n for n in nodes},
            {p.key: p for p in pods},
            {j: JobView(j, key, tuple(sorted(keys))) for j, (key, keys) in jobs.items()},
            taken_at=taken_at,
            device_taints=self.device_taints_served(),
        )

    def device_taints_served(self) -> bool | None:
        """Whether DeviceTaintRules are served (discovered once; None: discovery failed, and
        fence_gpu plans as if they were, its step then pinned to the fallback if not)."""
        try:
            return self.dra.rule_version() is not None
        except (ApiException, HTTPError) as exc:
            log.warning("DeviceTaintRule discovery failed: %s", exc)
            return None
