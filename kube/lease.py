"""The Kubernetes adapter for the leader Lease (coordination.k8s.io/v1): get, create, replace.

Kept apart so the RBAC the service needs can be read off this file: `coordination.k8s.io/leases`
get, create, update in the service's namespace. Optimistic concurrency does the arbitration: a
replace carries the resourceVersion that was read, so of two processes racing for an expired
lease exactly one wins (the other gets 409 Conflict).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from errors import TemporaryError


@dataclass(frozen=True, slots=True)
class LeaseState:
    holder: str | None
    duration: float
    acquired: float | None
    renewed: float | None
    transitions: int
    resource_version: str = ""


class MicroTime(datetime):
    """A Lease time as the API server parses it (metav1.MicroTime, RFC 3339 with exactly six
    fractional digits): the client writes `isoformat()`, which drops the fraction of a whole
    second, and a real server answers such a Lease with 400."""

    def isoformat(self, sep: str = "T", timespec: str = "microseconds") -> str:
        return super().isoformat(sep, "microseconds").replace("+00:00", "Z")


def _ts(t: float | None) -> datetime | None:
    return None if t is None else MicroTime.fromtimestamp(t, UTC)


def _secs(d: datetime | None) -> float | None:
    if d is None:
        return None
    return (d if d.tzinfo else d.replace(tzinfo=UTC)).timestamp()


class KubeLeaseClient:
    def __init__(self, api: client.ApiClient, namespace: str, name: str) -> None:
        self.api = api
        self.coord = client.CoordinationV1Api(api)
        self.namespace = namespace
        self.name = name

    def close(self) -> None:
        self.api.close()  # type: ignore[no-untyped-call]

    def get(self) -> LeaseState | None:
        try:
            lease = self.coord.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise TemporaryError(f"read lease: HTTP {exc.status} {exc.reason}") from exc
        except HTTPError as exc:
            raise TemporaryError(f"read lease: {exc}") from exc
        spec = lease.spec or client.V1LeaseSpec()
        return LeaseState(
            holder=spec.holder_identity or None,
            duration=float(spec.lease_duration_seconds or 0),
            acquired=_secs(spec.acquire_time),
            renewed=_secs(spec.renew_time),
            transitions=int(spec.lease_transitions or 0),
            resource_version=str(lease.metadata.resource_version or "") if lease.metadata else "",
        )

    def _body(self, s: LeaseState) -> client.V1Lease:
        return client.V1Lease(
            metadata=client.V1ObjectMeta(
                name=self.name,
                namespace=self.namespace,
                resource_version=s.resource_version or None,
                labels={"app.kubernetes.io/managed-by": "gpufleet"},
            ),
            spec=client.V1LeaseSpec(
                holder_identity=s.holder,
                lease_duration_seconds=max(1, round(s.duration)),
                acquire_time=_ts(s.acquired),
                renew_time=_ts(s.renewed),
                lease_transitions=s.transitions,
            ),
        )

    def create(self, s: LeaseState) -> LeaseState | None:
        """The created lease, or None when someone else created it first."""
        try:
            out = self.coord.create_namespaced_lease(self.namespace, self._body(s))
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise TemporaryError(f"create lease: HTTP {exc.status} {exc.reason}") from exc
        except HTTPError as exc:
            raise TemporaryError(f"create lease: {exc}") from exc
        return _with_rv(s, out)

    def replace(self, s: LeaseState) -> LeaseState | None:
        """Write `s` if the lease is still at `s.resource_version`; None on a conflict."""
        try:
            out = self.coord.replace_namespaced_lease(self.name, self.namespace, self._body(s))
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise TemporaryError(f"update lease: HTTP {exc.status} {exc.reason}") from exc
        except HTTPError as exc:
            raise TemporaryError(f"update lease: {exc}") from exc
        return _with_rv(s, out)


def _with_rv(s: LeaseState, lease: client.V1Lease) -> LeaseState:
    rv = str(lease.metadata.resource_version or "") if lease.metadata else ""
    return LeaseState(s.holder, s.duration, s.acquired, s.renewed, s.transitions, rv)
