"""Authentication for the simulated API server: bearer tokens to identities, and impersonation.

A real cluster knows who is asking before it decides what they may do. The simulator issues
opaque bearer tokens: one admin token (group `system:masters`, what the demo's and the tests' own
kubeconfig carries) and one per service account asked for (what gpufleet runs as in-cluster).
A request without a token is `system:anonymous`; an unknown token is 401 Unauthorized. An admin
may act as another user with the `Impersonate-User`/`Impersonate-Group` headers, as
`kubectl --as` does; anyone else asking to impersonate is refused.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Mapping, Sequence

from simulator.kube_api.rbac import AUTHENTICATED, MASTERS, SA_PREFIX, Identity

ADMIN = Identity("kubernetes-admin", (MASTERS, AUTHENTICATED))


class Unauthorized(Exception):
    """The request carries a token the server does not know: 401."""


class ImpersonationForbidden(Exception):
    """The requester may not impersonate: 403."""


class Authenticator:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.admin_token = "sim-admin-" + secrets.token_urlsafe(16)
        self._tokens: dict[str, Identity] = {self.admin_token: ADMIN}

    def service_account_token(self, namespace: str, name: str) -> str:
        """A token that authenticates as `system:serviceaccount:<namespace>:<name>`."""
        token = f"sim-sa-{namespace}-{name}-" + secrets.token_urlsafe(16)
        with self._lock:
            self._tokens[token] = Identity.service_account(namespace, name)
        return token

    def authenticate(self, authorization: str | None) -> Identity:
        if not authorization:
            return Identity.anonymous()
        scheme, _, token = authorization.partition(" ")
        with self._lock:
            who = self._tokens.get(token.strip()) if scheme.lower() == "bearer" else None
        if who is None:
            raise Unauthorized
        return who

    @staticmethod
    def impersonate(who: Identity, user: str | None, groups: Sequence[str]) -> Identity:
        """The identity a request acts as, given its Impersonate-* headers."""
        if not user:
            if groups:
                raise ImpersonationForbidden("Impersonate-Group needs Impersonate-User")
            return who
        if MASTERS not in who.groups:
            raise ImpersonationForbidden(
                f'users "{user}" is forbidden: User "{who.user}" cannot impersonate resource '
                f'"users" in API group "" at the cluster scope'
            )
        if not groups and user.startswith(SA_PREFIX):
            ns, _, name = user.removeprefix(SA_PREFIX).partition(":")
            return Identity.service_account(ns, name)
        return Identity(user, (*groups, AUTHENTICATED) if user != "system:anonymous" else ())


def impersonation_headers(headers: Mapping[str, str] | object) -> tuple[str | None, list[str]]:
    """(Impersonate-User, every Impersonate-Group) from an http.server message."""
    get_all = getattr(headers, "get_all", None)
    get = getattr(headers, "get", None)
    user = get("Impersonate-User") if get else None
    groups = list(get_all("Impersonate-Group") or []) if get_all else []
    return user, groups
