"""Recording one cycle: the latest fleet state replaced, this cycle's seconds added to rollups.

`Meter(db, config).record_cycle(snapshot, now, findings)` runs once per live cycle, on the
leader only; the interval goes to the 5-minute and the hourly rollups alike. Everything is one
transaction: the cursor (the time of the last recorded cycle, per cluster) is read with a row
lock, so a standby that takes over continues the accounting exactly where the old leader
stopped, a replayed or older cycle adds nothing, and a gap longer than `max_gap_seconds` counts
only that long.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Table, delete, insert, select
from sqlalchemy.dialects import postgresql, sqlite

from database.handle import Database
from database.tables import metering as t
from detectors.findings import Finding, FindingKind
from metering.gpu_columns import HEALTH_CODES, GpuColumns, Health, gpu_columns
from metering.metering_config import HOUR_SECONDS, MeteringConfig
from metering.rollup import bucket_overlaps, dimension_sums, usage_rows
from observer.fleet.model import NO_INDEX, FleetSnapshot


@dataclass(frozen=True, slots=True)
class CycleRecord:
    """What one `record_cycle` did: the seconds it accounted and the rows it wrote."""

    taken_at: float
    accounted_seconds: float
    gpus: int
    usage_rows: int


def _insert(conn: Connection) -> Any:
    return postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert


def state_rows(
    cluster: str, snap: FleetSnapshot, cols: GpuColumns, now: float
) -> list[dict[str, Any]]:
    gpus = snap.gpus
    node_names = [str(n.name) for n in snap.nodes]
    models = gpus.models
    pods = snap.pods
    jobs = [str(j.key) for j in snap.jobs]
    pod_idx = gpus.pod_index.tolist()
    job_idx = gpus.job_index.tolist()
    util = cols.utilization.tolist()
    health = [HEALTH_CODES[h].value for h in cols.health.tolist()]
    ns = [cols.namespaces[c] if c != NO_INDEX else "" for c in cols.namespace.tolist()]
    pool = [cols.pools[c] if c != NO_INDEX else "" for c in cols.pool.tolist()]
    mig = gpus.mig_instance.tolist()
    mig_profile = gpus.mig_profile.tolist()
    team = [cols.teams[c] if c != NO_INDEX else "" for c in cols.team.tolist()]
    node = [node_names[i] for i in gpus.node_index.tolist()]
    model = [models[i] if models else "" for i in gpus.model_index.tolist()]
    device = gpus.device_index.tolist()
    return [
        {
            "cluster": cluster,
            "uuid": uuid,
            "mig_instance": mig[i],
            "taken_at": now,
            "node": node[i],
            "pool": pool[i],
            "device": device[i],
            "model": model[i],
            "mig_profile": mig_profile[i],
            "health": health[i],
            "issue": cols.issue[i],
            "allocated": pod_idx[i] != NO_INDEX,
            "utilization": None if util[i] != util[i] else util[i],  # NaN -> NULL
            "namespace": ns[i],
            "pod": pods[pod_idx[i]].name if pod_idx[i] != NO_INDEX else "",
            "job": jobs[job_idx[i]] if job_idx[i] != NO_INDEX else "",
            "team": team[i],
        }
        for i, uuid in enumerate(gpus.uuid.tolist())
    ]


def lost_rows(conn: Connection, cluster: str, lost: set[str], now: float) -> list[dict[str, Any]]:
    """GPUs a gpu_lost finding names that left the snapshot (fallen off the bus, XID 79): their
    last known row kept, marked `lost`, so the fleet grid shows the hole instead of hiding it.
    Nothing is accounted for them (they are not in the snapshot's sums)."""
    if not lost:
        return []
    c = t.gpu_state.c
    q = select(t.gpu_state).where(c.cluster == cluster, c.uuid.in_(sorted(lost)))
    rows = []
    for r in conn.execute(q).mappings():
        row = dict(r)
        row.update(
            taken_at=now, health=Health.LOST.value, issue="gpu_lost", utilization=None,
            allocated=False, namespace="", pod="", job="", team="",
        )  # fmt: skip
        rows.append(row)
    return rows


ADDED = ("gpu_seconds", "allocated_seconds", "busy_seconds", "unmeasured_seconds")


def _add(conn: Connection, table: Table, rows: list[dict[str, object]]) -> None:
    """Upsert that adds: a bucket's seconds grow with every cycle that falls into it."""
    if not rows:
        return
    stmt = _insert(conn)(table)
    stmt = stmt.on_conflict_do_update(
        index_elements=["cluster", "dimension", "bucket", "key", "model"],
        set_={c: table.c[c] + stmt.excluded[c] for c in ADDED},
    )
    conn.execute(stmt, rows)


STATE_COLUMNS = tuple(c.name for c in t.gpu_state.columns)


def _insert_states(conn: Connection, states: list[dict[str, Any]]) -> None:
    """10k rows per cycle: PostgreSQL takes them through COPY (an executemany of 10k rows costs
    about a second of SQLAlchemy and driver CPU), SQLite through executemany."""
    if conn.dialect.name != "postgresql":
        conn.execute(insert(t.gpu_state), states)
        return
    raw: Any = conn.connection.driver_connection
    cols = ", ".join(f'"{c}"' for c in STATE_COLUMNS)
    with raw.cursor() as cur, cur.copy(f"COPY {t.gpu_state.name} ({cols}) FROM STDIN") as copy:
        for row in states:
            copy.write_row(tuple(row[c] for c in STATE_COLUMNS))


class Meter:
    """Records cycles of one cluster (the handle's) into the metering tables."""

    def __init__(self, db: Database, config: MeteringConfig | None = None) -> None:
        self.db = db
        self.config = config or MeteringConfig()

    @property
    def cluster(self) -> str:
        return self.db.cluster

    def record_cycle(
        self, snapshot: FleetSnapshot, now: float | None = None, findings: Iterable[Finding] = ()
    ) -> CycleRecord:
        """Replace the latest state and add (previous cycle, now] to the rollups.

        `now` defaults to the snapshot's `taken_at`. The first cycle ever recorded for a
        cluster only writes the state (there is no interval before it to account).
        """
        at = snapshot.taken_at if now is None else float(now)
        findings = list(findings)
        cols = gpu_columns(snapshot, findings, self.config.team_label, self.config.pool_label)
        states = state_rows(self.cluster, snapshot, cols, at)
        present = {str(r["uuid"]) for r in states}
        lost = {
            f.gpu_uuid
            for f in findings
            if f.kind is FindingKind.GPU_LOST and f.gpu_uuid and f.gpu_uuid not in present
        }
        with self.db.begin() as conn:
            last = conn.execute(
                select(t.cursor.c.taken_at)
                .where(t.cursor.c.cluster == self.cluster)
                .with_for_update()
            ).scalar_one_or_none()
            if last is not None and at < last:
                return CycleRecord(at, 0.0, len(states), 0)  # an older cycle: changes nothing
            dt = 0.0 if last is None else min(at - last, self.config.max_gap_seconds)
            states += lost_rows(conn, self.cluster, lost, at)
            sums = dimension_sums(snapshot, cols)
            rows = usage_rows(self.cluster, sums, bucket_overlaps(at - dt, at))
            hourly = usage_rows(self.cluster, sums, bucket_overlaps(at - dt, at, HOUR_SECONDS))
            conn.execute(delete(t.gpu_state).where(t.gpu_state.c.cluster == self.cluster))
            if states:
                _insert_states(conn, states)
            _add(conn, t.usage, rows)
            _add(conn, t.usage_hourly, hourly)
            ins = _insert(conn)
            cur = ins(t.cursor).values(cluster=self.cluster, taken_at=at, gpus=len(states))
            conn.execute(
                cur.on_conflict_do_update(
                    index_elements=["cluster"],
                    set_={"taken_at": cur.excluded.taken_at, "gpus": cur.excluded.gpus},
                )
            )
        return CycleRecord(at, dt, len(states), len(rows) + len(hourly))
