"""SelfSubjectAccessReview and SelfSubjectRulesReview (authorization.k8s.io/v1), answered by RBAC.

`kubectl auth can-i` and `gpufleet doctor` ask the API server whether the caller may do a thing
before doing it; the answer comes from the same authorizer that guards every request, with the
real object shapes (pkg/apis/authorization/v1: `status.allowed`, `status.reason`;
`status.resourceRules`, `status.nonResourceRules`, `status.incomplete`).
"""

from __future__ import annotations

from typing import Any

from simulator.kube_api.rbac import Attributes, Identity, Rbac

Obj = dict[str, Any]


class InvalidReview(ValueError):
    """The review's spec is malformed: 422 with this cause."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _review(body: Any, kind: str) -> Obj:
    if not isinstance(body, dict):
        raise InvalidReview("spec", "Required value")
    out: Obj = {
        "kind": kind,
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "spec": body.get("spec") or {},
    }
    return out


def access_review(rbac: Rbac, who: Identity, body: Any) -> Obj:
    review = _review(body, "SelfSubjectAccessReview")
    spec = review["spec"]
    res, nonres = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if (res is None) == (nonres is None):
        raise InvalidReview(
            "spec.resourceAttributes",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )
    if res is not None:
        attrs = Attributes(
            verb=str(res.get("verb") or ""),
            group=str(res.get("group") or ""),
            resource=str(res.get("resource") or ""),
            subresource=str(res.get("subresource") or ""),
            namespace=str(res.get("namespace") or ""),
            name=str(res.get("name") or ""),
        )
    else:
        attrs = Attributes(verb=str(nonres.get("verb") or ""), path=str(nonres.get("path") or ""))
    decision = rbac.authorize(who, attrs)
    status: Obj = {"allowed": decision.allowed}
    if decision.reason:
        status["reason"] = decision.reason
    review["status"] = status
    return review


def rules_review(rbac: Rbac, who: Identity, body: Any) -> Obj:
    review = _review(body, "SelfSubjectRulesReview")
    namespace = str(review["spec"].get("namespace") or "")
    resource_rules, non_resource_rules = [], []
    for r in rbac.rules_for(who, namespace):
        if r.get("nonResourceURLs"):
            non_resource_rules.append(
                {"verbs": list(r.get("verbs") or []), "nonResourceURLs": r["nonResourceURLs"]}
            )
        else:
            rule: Obj = {
                "verbs": list(r.get("verbs") or []),
                "apiGroups": list(r.get("apiGroups") or []),
                "resources": list(r.get("resources") or []),
            }
            if r.get("resourceNames"):
                rule["resourceNames"] = list(r["resourceNames"])
            resource_rules.append(rule)
    review["status"] = {
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": False,
    }
    return review
