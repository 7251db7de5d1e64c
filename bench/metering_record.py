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
import functools
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.performance_doc import median, stamp, table
from bench.remediation_decide import _pg_schema as _postgres  # the same throwaway schema
from database.tables import metering as t
from harness.benchmark_fleet import Fleet
from metering import Meter, fleet_state, usage
from metering.gpu_columns import gpu_columns
from metering.rollup import bucket_overlaps, dimension_sums, usage_rows
from observer.fleet.model import FleetSnapshot, frozen_map
from remediations.store import Store

TITLE = "Metering: record_cycle at 10k GPUs (metering.Meter)"


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


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


DAYS = 30


def seed_month(store: Store, snap: FleetSnapshot, end: float) -> int:
    """A month of hourly rollups (and the 5-minute buckets of its first and last hour) as
    record_cycle would leave them for this fleet, written directly (untimed)."""
    sums = dimension_sums(snap, gpu_columns(snap))
    start = end - DAYS * 86400
    hourly = usage_rows("bench", sums, bucket_overlaps(start, end, 3600))
    five = usage_rows("bench", sums, bucket_overlaps(start, start + 3600))
    five += usage_rows("bench", sums, bucket_overlaps(end - 3600, end))
    with store.engine.begin() as conn:
        for table, rows in ((t.usage_hourly, hourly), (t.usage, five)):
            for i in range(0, len(rows), 50_000):
                conn.execute(table.insert(), rows[i : i + 50_000])
    return len(hourly) + len(five)


def month_queries(url: str, n_gpus: int) -> dict[str, float]:
    fleet = Fleet(n_gpus)
    snap = _with_teams(fleet.snapshot(0)[1])
    end = 1_767_225_600.0 - 40 * 86400  # a month before the cycles' T0, on an hour boundary
    store = Store.open(url, cluster="bench")
    try:
        rows = seed_month(store, snap, end)
        lo, hi = end - DAYS * 86400 + 600, end - 600  # ragged ends: both tables are read
        out: dict[str, float] = {"rows": float(rows)}
        for by in ("job", "namespace", "node"):
            read = functools.partial(usage, store, lo, hi, by=by)
            out[by] = median([_timed(read)[0] for _ in range(3)])
        series = [
            _timed(lambda: usage(store, lo, hi, by="team", per_bucket=True, resolution=3600))[0]
            for _ in range(3)
        ]
        out["series"] = median(series)
        return out
    finally:
        store.close()


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


def _cycle_row(name: str, n_gpus: int, m: dict[str, float]) -> list[object]:
    """One store's record_cycle line: wall and CPU seconds, rows written, two reads."""
    return [
        name,
        f"{n_gpus:,}",
        f"**{m['wall']:.3f}**",
        f"{m['min']:.3f}–{m['max']:.3f}",
        f"{m['cpu']:.3f}",
        f"{n_gpus:,} + {int(m['rows']):,}",
        f"{m['state']:.3f}",
        f"{m['usage']:.3f}",
    ]


def _month_row(name: str, q: dict[str, float]) -> list[object]:
    """One store's line for a month of rollups: rows, and seconds per dashboard read."""
    return [
        name,
        f"{int(q['rows']):,}",
        f"{q['job']:.3f}",
        f"{q['namespace']:.3f}",
        f"{q['node']:.3f}",
        f"{q['series']:.3f}",
    ]


def run(runs: int, quick: bool) -> str:
    n_gpus = 1000 if quick else 10_000
    results: list[list[object]] = []
    month: list[list[object]] = []
    notes: list[str] = []
    for name, backend in (("SQLite (file, WAL)", _sqlite), ("PostgreSQL (local)", _postgres)):
        with backend() as url:
            if url is None:
                notes.append(f"{name}: skipped, PostgreSQL at 127.0.0.1:5432 unreachable.")
                continue
            m = measure(url, n_gpus, runs)
            q = month_queries(url, n_gpus)
            month.append(_month_row(name, q))
            results.append(_cycle_row(name, n_gpus, m))
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
    month_header = [
        "store",
        "rollup rows (a month)",
        "usage(30 d, job) s",
        "usage(30 d, namespace) s",
        "usage(30 d, node) s",
        "hourly series (30 d, team) s",
    ]
    body = [stamp(), "", table(header, results), "", table(month_header, month), ""]
    body.append(
        f"Median of {runs} timed cycles after 3 warm-up cycles; *our CPU s* is this process "
        "(building rows, SQLAlchemy, the driver), the rest of the wall time is the database. "
        "Target: well under the 30 s cycle at 10k GPUs. "
        f"The second table reads a month ({DAYS} days) of rollups of the same fleet, seeded "
        "directly as record_cycle leaves them (hourly buckets, and 5-minute buckets for the "
        "window's ragged first and last hour), medians of 3 reads: what the dashboard's "
        "utilization & cost page asks for a month."
    )
    body.extend(notes)
    return "\n".join(body)
