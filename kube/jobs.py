"""The Kubernetes adapter for node-pinned Jobs (batch/v1): create, read, delete. Nothing else.

Diagnostic Jobs (`dcgmi diag`) and the repair Jobs playbooks run (GPU reset) go through here, so
the RBAC they need can be read off this file: `batch/jobs` create, get, delete in gpufleet's
namespace. Each Job runs on one node (`spec.nodeName`, tolerating every
taint, since the node is cordoned and tainted by the quarantine), never retries, and cleans
itself up a day after it finished.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from errors import PermanentError, TemporaryError

log = logging.getLogger(__name__)
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpufleet"}


def _error(exc: Exception, what: str) -> Exception:
    if isinstance(exc, ApiException) and exc.status in (400, 401, 403, 404, 422):
        return PermanentError(f"{what}: HTTP {exc.status} {exc.reason}")
    status = exc.status if isinstance(exc, ApiException) else None
    return TemporaryError(f"{what}: {status or exc}")


def api_client(kubeconfig: str | Path | None) -> client.ApiClient:
    cfg = client.Configuration()
    if kubeconfig is None:
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig), client_configuration=cfg
        )
    return client.ApiClient(cfg)


@dataclass(frozen=True, slots=True)
class JobStatus:
    """A Job's outcome as its controller reports it: `passed`, `failed` or None (running)."""

    outcome: str | None
    detail: str = ""
    """The deciding condition's reason and message (why it failed), or where it stands."""


def job_body(
    name: str,
    namespace: str,
    node: str,
    image: str,
    command: list[str],
    labels: dict[str, str],
    gpus: int,
    deadline: int,
    *,
    container: str = "dcgm-diag",
    privileged: bool = False,
    host_path: str | None = None,
) -> dict[str, Any]:
    """The Job; `privileged` for repair Jobs that act on the device or host (GPU reset), and
    `host_path` mounted at the same path in the container (a node agent's sentinel file). A
    failing container's last log lines become its termination message (what nvidia-smi said)."""
    limits = {"nvidia.com/gpu": str(gpus)} if gpus > 0 else {}
    main: dict[str, Any] = {
        "name": container,
        "image": image,
        "command": command,
        "resources": {"limits": limits},
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    pod: dict[str, Any] = {
        "nodeName": node,
        "restartPolicy": "Never",
        "tolerations": [{"operator": "Exists"}],
        "containers": [main],
    }
    if privileged:
        main["securityContext"] = {"privileged": True}
    if host_path is not None:
        main["volumeMounts"] = [{"name": "host", "mountPath": host_path}]
        pod["volumes"] = [{"name": "host", "hostPath": {"path": host_path, "type": "Directory"}}]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {**MANAGED_BY, **labels}},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline,
            "ttlSecondsAfterFinished": 86400,
            "template": {
                "metadata": {"labels": {**MANAGED_BY, **labels}},
                "spec": pod,
            },
        },
    }


class KubeNodeJobs:
    """NodeJobs over the `kubernetes` client, in one namespace."""

    def __init__(self, api: client.ApiClient, *, deadline: int = 1800) -> None:
        self.api = api
        self.batch = client.BatchV1Api(api)
        self.core = client.CoreV1Api(api)
        self.deadline = deadline

    def close(self) -> None:
        self.api.close()  # type: ignore[no-untyped-call]

    def ensure(
        self,
        namespace: str,
        node: str,
        name: str,
        image: str,
        command: list[str],
        labels: dict[str, str],
        gpus: int = 0,
        *,
        container: str = "dcgm-diag",
        privileged: bool = False,
        host_path: str | None = None,
    ) -> str:
        """Create the Job unless it exists (idempotent by name): `created` or `exists`."""
        body = job_body(
            name,
            namespace,
            node,
            image,
            command,
            labels,
            gpus,
            self.deadline,
            container=container,
            privileged=privileged,
            host_path=host_path,
        )
        try:
            self.batch.create_namespaced_job(namespace, body)  # type: ignore[arg-type]
        except ApiException as exc:
            if exc.status == 409:
                return "exists"
            raise _error(exc, f"create job {namespace}/{name}") from exc
        except HTTPError as exc:
            raise _error(exc, f"create job {namespace}/{name}") from exc
        return "created"

    def _read(self, namespace: str, name: str) -> Any | None:
        try:
            return self.batch.read_namespaced_job(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _error(exc, f"read job {namespace}/{name}") from exc
        except HTTPError as exc:
            raise _error(exc, f"read job {namespace}/{name}") from exc

    def labels(self, namespace: str, name: str) -> dict[str, str] | None:
        """The Job's labels (None: no such Job): whose it is."""
        job = self._read(namespace, name)
        return None if job is None else dict(job.metadata.labels or {})

    def exists(self, namespace: str, name: str) -> bool:
        return self._read(namespace, name) is not None

    def outcome(self, namespace: str, name: str) -> str | None:
        found = self.status(namespace, name)
        return None if found is None else found.outcome

    def status(self, namespace: str, name: str) -> JobStatus | None:
        """The Job's outcome with the reason its controller gave; None when there is no Job."""
        job = self._read(namespace, name)
        if job is None:
            return None
        st = job.status
        if st is None:
            return JobStatus(None, "not started")
        for c in st.conditions or ():
            why = ": ".join(x for x in (c.reason, c.message) if x)
            if c.status == "True" and c.type in ("Complete", "SuccessCriteriaMet"):
                return JobStatus("passed", why)
            if c.status == "True" and c.type in ("Failed", "FailureTarget"):
                return JobStatus("failed", "; ".join([why, *self._said(namespace, name)[:1]]))
        if st.succeeded:
            return JobStatus("passed", "succeeded")
        if st.failed:
            return JobStatus("failed", "; ".join(["failed", *self._said(namespace, name)[:1]]))
        return JobStatus(None, "running" if st.active else "not started")

    def reason(self, namespace: str, name: str) -> str:
        """Why the Job's container ended as it did, in its own words ("" when it said nothing):
        the note a failed diagnostic's verdict carries."""
        return "; ".join(self._said(namespace, name)[:1])

    def _said(self, namespace: str, name: str) -> list[str]:
        """What the Job's containers said as they ended (their termination messages): the only
        place a real cluster keeps why a Job failed; its condition says only "backoff limit"."""
        try:
            pods = self.core.list_namespaced_pod(
                namespace, label_selector=f"batch.kubernetes.io/job-name={name}"
            ).items
        except (ApiException, HTTPError):
            return []  # the Job's own condition is enough to fail on
        return [
            c.state.terminated.message.strip()
            for p in pods
            for c in ((p.status.container_statuses if p.status is not None else None) or [])
            if c.state is not None and c.state.terminated is not None and c.state.terminated.message
        ]

    def delete(self, namespace: str, name: str) -> None:
        try:
            self.batch.delete_namespaced_job(name, namespace, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise _error(exc, f"delete job {namespace}/{name}") from exc
