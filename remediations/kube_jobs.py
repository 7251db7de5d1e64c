"""The Kubernetes adapter for node-pinned Jobs (batch/v1): create, read, delete. Nothing else.

Diagnostic Jobs (`dcgmi diag`) and the repair Jobs playbooks run (GPU reset) go through here, so
the RBAC they need can be read off this file: `batch/jobs` create, get, delete in gpufleet's
namespace. Each Job runs on one node (`spec.nodeName`, tolerating every
taint, since the node is cordoned and tainted by the quarantine), never retries, and cleans
itself up a day after it finished.
"""

from __future__ import annotations

import logging
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


def job_body(
    name: str,
    namespace: str,
    node: str,
    image: str,
    command: list[str],
    labels: dict[str, str],
    gpus: int,
    deadline: int,
) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus > 0 else {}
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
                "spec": {
                    "nodeName": node,
                    "restartPolicy": "Never",
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {
                            "name": "dcgm-diag",
                            "image": image,
                            "command": command,
                            "resources": {"limits": limits},
                        }
                    ],
                },
            },
        },
    }


class KubeNodeJobs:
    """NodeJobs over the `kubernetes` client, in one namespace."""

    def __init__(self, api: client.ApiClient, *, deadline: int = 1800) -> None:
        self.api = api
        self.batch = client.BatchV1Api(api)
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
    ) -> str:
        """Create the Job unless it exists (idempotent by name): `created` or `exists`."""
        body = job_body(name, namespace, node, image, command, labels, gpus, self.deadline)
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

    def exists(self, namespace: str, name: str) -> bool:
        return self._read(namespace, name) is not None

    def outcome(self, namespace: str, name: str) -> str | None:
        job = self._read(namespace, name)
        if job is None or job.status is None:
            return None
        for c in job.status.conditions or ():
            if c.status == "True" and c.type in ("Complete", "SuccessCriteriaMet"):
                return "passed"
            if c.status == "True" and c.type in ("Failed", "FailureTarget"):
                return "failed"
        if job.status.succeeded:
            return "passed"
        if job.status.failed:
            return "failed"
        return None

    def delete(self, namespace: str, name: str) -> None:
        try:
            self.batch.delete_namespaced_job(name, namespace, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise _error(exc, f"delete job {namespace}/{name}") from exc
