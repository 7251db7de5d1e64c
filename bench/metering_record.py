"""Benchmark: metering's `record_cycle` at 10k GPUs, every cycle, on SQLite and PostgreSQL.

Issue 12: the latest fleet state and the 5-minute rollups must be cheap enough at 10k GPUs to
write every cycle. The input is the detector benchmark's fleet (1,250 nodes x 8 GPUs, ~780
16-rank training jobs in 20 namespaces, inference and idle pods, three GPU models) with a `team`
label on every pod; each timed cycle is a fresh snapshot 30 s after the last (new noise), so
every cycle replaces 10k state rows and adds to ~2,100 rollup rows (about one in ten cycles
crosses a bucket boundary and writes twice that). Also timed: the reads the dashboard makes
(the whole fleet state; an hour of usage by namespace). SQLite is a file in a temporary
directory (WAL, as the store opens it); PostgreSQL is the local server at 127.0.0.1:5432 in a
schema of its own (skipped when unreachable).
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.detectors_cycle import Fleet
from bench.report import median, stamp, table
from metering import Meter, fleet_state, usage
from observer.fleet.model import FleetSnapshot, frozen_map
from remediations.store import Store

TITLE = "Metering: record_cycle at 10k GPUs (metering.Meter)"
PG_DSN = "host=127.0.0.1 port=5432 dbname=test user=postgres"
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def _with_teams(snap: FleetSnapshot) -> FleetSnapshot:
    pods = tuple(
        dataclasses.replace(p, labels=frozen_map({"team": f"team-{i % 8}"}))
        for i, p in enumerate(snap.pods)
    )
    return dataclasses.replace(snap, pods=pods)


@contextmanager
def _sqlite() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        yield f"sqlite:///{Path(tmp) / 'bench.db'}"


@contextmanager
def _postgres() -> Iterator[str | None]:
    try:
        import psycopg

        schema = f"bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(PG_DSN, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
    except Exception:  # no server: the case is skipped and says so
        yield None
        return
    try:
        yield f"{PG_URL}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def measure(url: str, n_gpus: int, runs: int) -> dict[str, float]:
    fleet = Fleet(n_gpus)
    store = Store.open(url, cluster="bench")
    meter = Meter(store)
    try:
        for k in range(3):  # warm-up: first cycle (state only), then two accounted
            meter.record_cycle(_with_teams(fleet.snapshot(k)[1]))
        walls, cpus, rows = [], [], []
        for k in range(3, 3 + runs):
            snap = _with_teams(fleet.snapshot(k)[1])
            w0, c0 = time.perf_counter(), time.process_time()
            rec = meter.record_cycle(snap)
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
            rows.append(rec.usage_rows)
        end = snap.taken_at
        state = [_timed(lambda: fleet_state(store)) for _ in range(3)]
        hour = [_timed(lambda: usage(store, end - 3600, end, by="namespace")) for _ in range(3)]
        return {
            "wall": median(walls),
            "min": min(walls),
            "max": max(walls),
            "cpu": median(cpus),
            "rows": median(rows),
            "state": median([w for w, _ in state]),
            "usage": median([w for w, _ in hour]),
        }
    finally:
        store.close()


def run(runs: int, quick: bool) -> str:
    n_gpus = 1000 if quick else 10_000
    results: list[list[object]] = []
    notes: list[str] = []
    for name, backend in (("SQLite (file, WAL)", _sqlite), ("PostgreSQL (local)", _postgres)):
        with backend() as url:
            if url is None:
                notes.append(f"{name}: skipped, PostgreSQL at 127.0.0.1:5432 unreachable.")
                continue
            m = measure(url, n_gpus, runs)
            results.append(
                [
                    name,
                    f"{n_gpus:,}",
                    f"**{m['wall']:.3f}**",
                    f"{m['min']:.3f}–{m['max']:.3f}",
                    f"{m['cpu']:.3f}",
                    f"{n_gpus:,} + {int(m['rows']):,}",
                    f"{m['state']:.3f}",
                    f"{m['usage']:.3f}",
                ]
            )
    header = [
        "store",
        "GPUs",
        "record_cycle median s",
        "min–max s",
        "our CPU s",
        "rows written (state + rollups)",
        "fleet_state() s",
        "usage(1 h, namespace) s",
    ]
    body = [stamp(), "", table(header, results), ""]
    body.append(
        f"Median of {runs} timed cycles after 3 warm-up cycles; *our CPU s* is this process "
        "(building rows, SQLAlchemy, the driver), the rest of the wall time is the database. "
        "Target: well under the 30 s cycle at 10k GPUs."
    )
    body.extend(notes)
    return "\n".join(body)
