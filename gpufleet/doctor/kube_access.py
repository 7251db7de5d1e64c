"""The doctor's Kubernetes adapter: what this identity may do (SelfSubjectAccessReview) and
which version of `resource.k8s.io` serves DeviceTaintRules.

`authorization.k8s.io/v1` SelfSubjectAccessReview: the API server answers, for the caller's own
credentials, whether one verb on one resource (in one namespace) is allowed, the way
`kubectl auth can-i` asks. Every authenticated user may create one (the `system:basic-user`
ClusterRole); deploy/base/rbac.yaml grants it explicitly so the rule is visible.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from kube.dra import rule_version


@dataclass(frozen=True, slots=True)
class Access:
    group: str
    resource: str
    verb: str
    namespace: str = ""
    """Empty: cluster-wide (or every namespace)."""

    def __str__(self) -> str:
        res = f"{self.resource}.{self.group}" if self.group else self.resource
        where = f" in {self.namespace}" if self.namespace else ""
        return f"{self.verb} {res}{where}"


class AccessUnknown(Exception):
    """The API server did not answer the review (not served, refused, unreachable)."""


class KubeAccess:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.authz = client.AuthorizationV1Api(api)

    def close(self) -> None:
        self.api.close()  # type: ignore[no-untyped-call]

    def allowed(self, a: Access) -> bool:
        resource, _, sub = a.resource.partition("/")
        attrs = client.V1ResourceAttributes(
            group=a.group, resource=resource, subresource=sub or None, verb=a.verb,
            namespace=a.namespace or None,
        )  # fmt: skip
        body = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=attrs)
        )
        try:
            review = self.authz.create_self_subject_access_review(body, _request_timeout=10)
        except ApiException as exc:
            raise AccessUnknown(f"HTTP {exc.status} {exc.reason}") from None
        except HTTPError as exc:
            raise AccessUnknown(str(exc)) from None
        status = review.status
        return bool(status is not None and status.allowed)

    def device_taint_version(self) -> str | None:
        """The `resource.k8s.io` version that serves DeviceTaintRules (None: none does)."""
        try:
            return rule_version(self.api)
        except (ApiException, HTTPError) as exc:
            raise AccessUnknown(str(exc)) from None
