"""The Kubernetes adapter that tells which cluster this is: the UID of namespace `kube-system`.

Kept apart so its RBAC reads off this file: `namespaces` get (cluster-wide). The UID is the
cluster's identity for gpufleet.service.cluster_claim (it lives as long as the cluster; the API
server's URL can change and differ between a pod and a laptop).
"""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from errors import PermanentError, TemporaryError

NAMESPACE = "kube-system"


def cluster_uid(api: client.ApiClient) -> tuple[str, str]:
    """(kube-system namespace UID, API server URL) of the cluster `api` talks to."""
    core = client.CoreV1Api(api)
    server = str(api.configuration.host or "")
    try:
        ns = core.read_namespace(NAMESPACE, _request_timeout=10)
    except ApiException as exc:
        if exc.status in (401, 403, 404):
            raise PermanentError(
                f"cannot read namespace {NAMESPACE} at {server}: HTTP {exc.status} {exc.reason}",
                source=server,
                hint="grant `get` on namespaces (deploy/base/rbac.yaml) and check the kubeconfig",
            ) from None
        raise TemporaryError(
            f"read namespace {NAMESPACE}: HTTP {exc.status}", source=server
        ) from None
    except HTTPError as exc:
        raise TemporaryError(f"read namespace {NAMESPACE}: {exc}", source=server) from None
    uid = ns.metadata.uid if ns.metadata is not None else None
    if not uid:
        raise PermanentError(f"namespace {NAMESPACE} at {server} has no UID", source=server)
    return str(uid), server
