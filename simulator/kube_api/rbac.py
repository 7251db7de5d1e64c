"""RBAC for the simulated API server: who may do what, decided as the real RBAC authorizer does.

A permission missing from `deploy/` must fail a test here the way it fails on a real cluster, so
each request is authorised against the Roles, ClusterRoles and their bindings the server was given
(rendered from `deploy/`), plus the bootstrap policy every real cluster has: `system:masters` may
do anything, every authenticated user may read discovery and ask `SelfSubjectAccessReview`s, and
everyone may read `/healthz`, `/version` and the like. Matching follows
k8s.io/kubernetes/pkg/apis/rbac/v1/evaluation_helpers.go (`*`, `*/subresource`, `resourceNames`,
`nonResourceURLs` with a trailing `*`); the allow reason is the one `kubectl auth can-i` shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
SA_PREFIX = "system:serviceaccount:"


@dataclass(frozen=True, slots=True)
class Identity:
    """An authenticated (or anonymous) user: its name and groups, as the API server sees them."""

    user: str
    groups: tuple[str, ...]

    @staticmethod
    def service_account(namespace: str, name: str) -> Identity:
        groups = ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED)
        return Identity(f"{SA_PREFIX}{namespace}:{name}", groups)

    @staticmethod
    def anonymous() -> Identity:
        return Identity(ANONYMOUS, (UNAUTHENTICATED,))


@dataclass(frozen=True, slots=True)
class Attributes:
    """What a request asks: a resource request (`resource` set) or a non-resource path."""

    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""

    @property
    def is_resource(self) -> bool:
        return bool(self.resource)


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str = ""


def _in(values: Sequence[str], value: str) -> bool:
    return "*" in values or value in values


def _resource_matches(rule_resources: Sequence[str], attrs: Attributes) -> bool:
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    for r in rule_resources:
        if r in ("*", combined):
            return True
        if attrs.subresource and r == f"*/{attrs.subresource}":
            return True
    return False


def _url_matches(rule_urls: Sequence[str], path: str) -> bool:
    for u in rule_urls:
        if u == "*" or u == path or (u.endswith("*") and path.startswith(u[:-1])):
            return True
    return False


def rule_allows(rule: Mapping[str, Any], attrs: Attributes) -> bool:
    """One PolicyRule against one request (rbac/v1 evaluation_helpers RuleAllows)."""
    if not _in(rule.get("verbs") or [], attrs.verb):
        return False
    if not attrs.is_resource:
        return _url_matches(rule.get("nonResourceURLs") or [], attrs.path)
    if not _in(rule.get("apiGroups") or [], attrs.group):
        return False
    if not _resource_matches(rule.get("resources") or [], attrs):
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


# The bootstrap ClusterRoles a client meets (plugin/pkg/auth/authorizer/rbac/bootstrappolicy).
_DISCOVERY_URLS = ["/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", "/version",
                   "/version/", "/healthz", "/livez", "/readyz"]  # fmt: skip
_PUBLIC_URLS = ["/healthz", "/livez", "/readyz", "/version", "/version/"]
_BOOTSTRAP: tuple[tuple[str, str, tuple[str, ...], list[Obj]], ...] = (
    ("cluster-admin", "Group", (MASTERS,),
     [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
      {"verbs": ["*"], "nonResourceURLs": ["*"]}]),
    ("system:discovery", "Group", (AUTHENTICATED,),
     [{"verbs": ["get"], "nonResourceURLs": _DISCOVERY_URLS}]),
    ("system:public-info-viewer", "Group", (AUTHENTICATED, UNAUTHENTICATED),
     [{"verbs": ["get"], "nonResourceURLs": _PUBLIC_URLS}]),
    ("system:basic-user", "Group", (AUTHENTICATED,),
     [{"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
       "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]},
      {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"],
       "resources": ["selfsubjectreviews"]}]),
)  # fmt: skip


def _subject_matches(subject: Mapping[str, Any], who: Identity, binding_ns: str) -> bool:
    kind = subject.get("kind")
    if kind == "User":
        return bool(subject.get("name") == who.user)
    if kind == "Group":
        return subject.get("name") in who.groups
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or binding_ns
        return who.user == f"{SA_PREFIX}{ns}:{subject.get('name')}"
    return False


def _describe_subject(subject: Mapping[str, Any], binding_ns: str) -> str:
    if subject.get("kind") == "ServiceAccount":
        ns = subject.get("namespace") or binding_ns
        return f'ServiceAccount "{ns}/{subject.get("name")}"'
    return f'{subject.get("kind")} "{subject.get("name")}"'


class Rbac:
    """The cluster's RBAC objects and the decision for one request. Immutable after building."""

    def __init__(self, documents: Iterable[Mapping[str, Any]] = ()) -> None:
        self.cluster_roles: dict[str, list[Obj]] = {}
        self.roles: dict[tuple[str, str], list[Obj]] = {}
        self.bindings: list[Obj] = []
        for name, _, _, rules in _BOOTSTRAP:
            self.cluster_roles[name] = rules
        for name, kind, groups, _ in _BOOTSTRAP:
            self.bindings.append({
                "kind": "ClusterRoleBinding", "metadata": {"name": name},
                "roleRef": {"kind": "ClusterRole", "name": name},
                "subjects": [{"kind": kind, "name": g} for g in groups],
            })  # fmt: skip
        for doc in documents:
            self._add(doc)

    def _add(self, doc: Mapping[str, Any]) -> None:
        kind = doc.get("kind")
        meta = doc.get("metadata") or {}
        if kind == "ClusterRole":
            self.cluster_roles[meta["name"]] = list(doc.get("rules") or [])
        elif kind == "Role":
            self.roles[(meta.get("namespace") or "default", meta["name"])] = list(
                doc.get("rules") or []
            )
        elif kind in ("ClusterRoleBinding", "RoleBinding"):
            self.bindings.append(dict(doc))

    def without(self, group: str, resource: str, verb: str) -> Rbac:
        """A copy with `verb` on `group`/`resource` taken out of every role: a permission
        missing from deploy/, for tests."""
        out = Rbac()

        def strip(rules: list[Obj]) -> list[Obj]:
            kept = []
            for r in rules:
                if group in (r.get("apiGroups") or []) and resource in (r.get("resources") or []):
                    r = {**r, "verbs": [v for v in r.get("verbs") or [] if v != verb]}
                kept.append(r)
            return kept

        out.cluster_roles = {k: strip(v) for k, v in self.cluster_roles.items()}
        out.roles = {k: strip(v) for k, v in self.roles.items()}
        out.bindings = list(self.bindings)
        return out

    def _applicable(
        self, who: Identity, namespace: str
    ) -> Iterable[tuple[Obj, Mapping[str, Any], list[Obj]]]:
        """(binding, matched subject, its role's rules) for each binding of `who` that applies
        in `namespace` ("" for cluster scope)."""
        for b in self.bindings:
            meta = b.get("metadata") or {}
            ns = meta.get("namespace") or ""
            if b.get("kind") == "RoleBinding" and (not namespace or namespace != ns):
                continue
            subject = next(
                (s for s in b.get("subjects") or [] if _subject_matches(s, who, ns)), None
            )
            if subject is None:
                continue
            ref = b.get("roleRef") or {}
            rules = (
                self.roles.get((ns, ref.get("name", "")))
                if ref.get("kind") == "Role"
                else self.cluster_roles.get(ref.get("name", ""))
            )
            yield b, subject, rules or []

    def rules_for(self, who: Identity, namespace: str) -> list[Obj]:
        """Every rule `who` holds in `namespace`: what SelfSubjectRulesReview lists."""
        return [r for _, _, rules in self._applicable(who, namespace) for r in rules]

    def authorize(self, who: Identity, attrs: Attributes) -> Decision:
        for b, subject, rules in self._applicable(who, attrs.namespace):
            meta = b.get("metadata") or {}
            ns = meta.get("namespace") or ""
            ref = b.get("roleRef") or {}
            if any(rule_allows(r, attrs) for r in rules):
                where = (
                    f"{ns}/{meta.get('name')}"
                    if b.get("kind") == "RoleBinding"
                    else (meta.get("name"))
                )
                reason = (
                    f'RBAC: allowed by {b.get("kind")} "{where}" of {ref.get("kind")} '
                    f'"{ref.get("name")}" to {_describe_subject(subject, ns)}'
                )
                return Decision(True, reason)
        return Decision(False, "")


def forbidden_message(who: Identity, attrs: Attributes) -> str:
    """The 403 message of k8s.io/apiserver endpoints/handlers/responsewriters (forbiddenMessage,
    wrapped by apierrors.NewForbidden)."""
    if not attrs.is_resource:
        return f'forbidden: User "{who.user}" cannot {attrs.verb} path "{attrs.path}"'
    res = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    where = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    why = (
        f'User "{who.user}" cannot {attrs.verb} resource "{res}" '
        f'in API group "{attrs.group}" {where}'
    )
    qualified = f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource
    what = f'{qualified} "{attrs.name}"' if attrs.name else qualified
    return f"{what} is forbidden: {why}"
