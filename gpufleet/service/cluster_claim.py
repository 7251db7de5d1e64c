"""One journal per cluster: the configured `cluster` name is bound to one Kubernetes cluster.

Many clusters may share one PostgreSQL, each under its own `cluster` name. Two clusters under the
same name (`cluster: default` left as shipped) would read and execute each other's approved
actions. On first start the service records the name with the cluster's identity, the UID of its
`kube-system` namespace (stable for the cluster's life, unlike an API server URL); every later
start compares, and a name that belongs to another cluster stops the service before anything
runs (table `cluster_identity`, migration 0005_cluster_identity).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError

from database.handle import Database
from database.tables.service import CLUSTER_IDENTITY
from errors import PermanentError


class ClusterMismatch(PermanentError):
    """The configured cluster name is recorded for another Kubernetes cluster."""


@dataclass(frozen=True, slots=True)
class ClusterIdentity:
    cluster: str
    kube_system_uid: str
    api_server: str
    recorded_at: float
    recorded_by: str


def recorded(db: Database) -> ClusterIdentity | None:
    """The Kubernetes cluster the handle's cluster name is recorded for, if any."""
    q = select(CLUSTER_IDENTITY).where(CLUSTER_IDENTITY.c.cluster == db.cluster)
    with db.connect() as conn:
        row = conn.execute(q).mappings().first()
    if row is None:
        return None
    return ClusterIdentity(**{k: row[k] for k in ClusterIdentity.__dataclass_fields__})


def claim_cluster(db: Database, uid: str, api_server: str, by: str, now: float) -> ClusterIdentity:
    """Record the handle's cluster name as the cluster whose kube-system UID is `uid`, or check
    that it is; ClusterMismatch when the name is recorded for another UID."""
    cluster = db.cluster
    for _ in range(2):  # a second replica may insert between our read and our insert
        found = recorded(db)
        if found is not None:
            if found.kube_system_uid != uid:
                raise ClusterMismatch(
                    f"cluster name {cluster!r} belongs to another Kubernetes cluster in this "
                    f"database (kube-system UID {found.kube_system_uid}, API "
                    f"{found.api_server or '?'}, recorded by {found.recorded_by or '?'}); this one "
                    f"is {uid} ({api_server})",
                    source="cluster",
                    hint="give this cluster its own `cluster:` name in the config (one journal "
                    "per cluster), or point store_url at its own database",
                )
            return found
        row = ClusterIdentity(cluster, uid, api_server[:512], now, by[:253])
        try:
            with db.begin() as conn:
                conn.execute(insert(CLUSTER_IDENTITY).values(**_values(row)))
            return row
        except IntegrityError:
            continue
    raise ClusterMismatch(f"could not record cluster {cluster!r}", source="cluster")


def _values(row: ClusterIdentity) -> dict[str, object]:
    return {k: getattr(row, k) for k in ClusterIdentity.__dataclass_fields__}
