"""Run records of scheduled jobs in the database (table `service_job_runs`, migration 0004_service).

`claim(job, fire)` is the exactly-once point: it records `fire` as the job's last scheduled fire
only if the stored one is older, in one statement, so of two processes (or a scheduler firing and
a restart catching up) only one runs a given fire. `finish` and `miss` record what happened.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from database.handle import Database
from database.tables.service import JOB_RUNS


@dataclass(frozen=True, slots=True)
class JobRun:
    job: str
    kind: str
    last_fire: float
    last_started: float | None
    last_finished: float | None
    last_ok: bool | None
    last_outcome: str
    last_owner: str
    runs: int
    misses: int


class JobRuns(Database):
    """One cluster's scheduled-job records (`JobRuns.on(journal)`: the journal's database)."""

    def get(self, job: str) -> JobRun | None:
        q = select(JOB_RUNS).where(JOB_RUNS.c.cluster == self.cluster, JOB_RUNS.c.job == job)
        with self.connect() as conn:
            row = conn.execute(q).mappings().first()
        if row is None:
            return None
        return JobRun(**{k: row[k] for k in JobRun.__dataclass_fields__})

    def all(self) -> list[JobRun]:
        q = select(JOB_RUNS).where(JOB_RUNS.c.cluster == self.cluster).order_by(JOB_RUNS.c.job)
        with self.connect() as conn:
            rows = conn.execute(q).mappings().all()
        return [JobRun(**{k: r[k] for k in JobRun.__dataclass_fields__}) for r in rows]

    def claim(self, job: str, kind: str, fire: float, owner: str, now: float) -> bool:
        """Record `fire` as started by `owner`; False when this fire (or a later one) was
        already claimed: the caller must not run it."""
        where = (
            (JOB_RUNS.c.cluster == self.cluster)
            & (JOB_RUNS.c.job == job)
            & (JOB_RUNS.c.last_fire < fire)
        )
        values = {
            "kind": kind,
            "last_fire": fire,
            "last_started": now,
            "last_finished": None,
            "last_ok": None,
            "last_outcome": "running",
            "last_owner": owner,
        }
        with self.begin() as conn:
            res = conn.execute(
                update(JOB_RUNS).where(where).values(runs=JOB_RUNS.c.runs + 1, **values)
            )
            if res.rowcount == 1:
                return True
        try:
            with self.begin() as conn:
                conn.execute(
                    insert(JOB_RUNS).values(cluster=self.cluster, job=job, runs=1, **values)
                )
        except IntegrityError:
            return False  # a record exists and its fire is not older: already claimed
        return True

    def finish(self, job: str, fire: float, ok: bool, outcome: str, now: float) -> None:
        where = (
            (JOB_RUNS.c.cluster == self.cluster)
            & (JOB_RUNS.c.job == job)
            & (JOB_RUNS.c.last_fire == fire)
        )
        with self.begin() as conn:
            conn.execute(
                update(JOB_RUNS)
                .where(where)
                .values(last_finished=now, last_ok=ok, last_outcome=outcome[:2000])
            )

    def miss(self, job: str, kind: str, fire: float, owner: str, now: float, why: str) -> bool:
        """Claim `fire` as missed (not run): it is then never run later either."""
        if not self.claim(job, kind, fire, owner, now):
            return False
        where = (JOB_RUNS.c.cluster == self.cluster) & (JOB_RUNS.c.job == job)
        with self.begin() as conn:
            conn.execute(
                update(JOB_RUNS)
                .where(where)
                .values(
                    runs=JOB_RUNS.c.runs - 1,
                    misses=JOB_RUNS.c.misses + 1,
                    last_finished=now,
                    last_ok=False,
                    last_outcome=f"missed: {why}"[:2000],
                )
            )
        return True
