"""Benchmark: each dashboard page rendered for a 10k-GPU fleet and a month of history.

Issue 14: every page renders in <= 2 s for 10k GPUs and a month of incidents. The journal is a
SQLite file (WAL, as the store opens it) holding: metering's latest state of 10k GPUs in four
pools and a few live cycles (recorded by the real Meter on the detector benchmark's fleet), a
month of 5-minute and hourly rollups for the fleet, pool, namespace and team dimensions (copied
from a recorded bucket) and a day of them for nodes and jobs, 30,000 resolved incidents
over 30 days plus the engine-written incidents, actions and audit of harness/dashboard_seed.py (with
its GPU repairs, so Remediation shows Out of service and Fleet counts them). Each
page is run through Streamlit's AppTest (the script as a browser session runs it, without the
browser's drawing): *cold* after clearing the query caches (the first visitor after the TTL),
*warm* with them (everyone else within the TTL).
"""

from __future__ import annotations

import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import insert, select

from bench.performance_doc import median, stamp, table
from dashboards import data
from dashboards.shell import SETTINGS_KEY
from database.tables import metering as mt
from metering import BUCKET_SECONDS
from remediations.store import Store

TITLE = "Dashboard: page render at 10k GPUs and a month of history (dashboards/)"
APP = Path(__file__).resolve().parents[1] / "dashboards" / "app.py"
PAGES = ("fleet", "incidents", "jobs", "remediation", "policy", "utilization", "whatif")
DAY = 86400.0
SECONDS = ("gpu_seconds", "allocated_seconds", "busy_seconds", "unmeasured_seconds")


def _history(store: Store, now: float, days: int) -> int:
    """Copy the newest recorded bucket's rollups back over `days` (fleet, pool, namespace,
    team) and one day (node, job); returns the rows written."""
    u = mt.usage.c
    with store.engine.begin() as conn:
        newest = conn.execute(select(u.bucket).order_by(u.bucket.desc()).limit(1)).scalar_one()
        rows = [dict(r._mapping) for r in conn.execute(select(mt.usage).where(u.bucket == newest))]
        oldest = conn.execute(select(u.bucket).order_by(u.bucket).limit(1)).scalar_one()
        first = int(oldest - BUCKET_SECONDS)
        written = 0
        batch: list[dict[str, object]] = []
        for k in range(int(days * DAY // BUCKET_SECONDS)):
            b = first - k * BUCKET_SECONDS
            long = k < DAY // BUCKET_SECONDS
            batch += [
                {**r, "bucket": b}
                for r in rows
                if long or r["dimension"] in ("fleet", "pool", "namespace", "team")
            ]
            if len(batch) > 20_000:
                conn.execute(insert(mt.usage), batch)
                written += len(batch)
                batch = []
        if batch:
            conn.execute(insert(mt.usage), batch)
            written += len(batch)
        h = mt.usage_hourly.c
        oldest_hour = conn.execute(select(h.bucket).order_by(h.bucket).limit(1)).scalar_one()
        hours = [
            {**r, "bucket": int(oldest_hour - k * 3600), **{c: r[c] * 12 for c in SECONDS}}
            for k in range(1, int(days * 24))
            for r in rows
            if r["dimension"] in ("fleet", "pool", "namespace", "team") or k <= 24
        ]
        for i in range(0, len(hours), 20_000):
            conn.execute(insert(mt.usage_hourly), hours[i : i + 20_000])
        written += len(hours)
    return written


def seed(url: str, n_gpus: int, incidents: int, days: int) -> int:
    from harness.dashboard_seed import (
        bulk_incidents,
        seed_cluster,
        seed_fleet,
        seed_repairs,
        seed_straggler,
    )

    store = Store.open(url, cluster="bench")
    try:
        now = time.time()
        seed_fleet(store, n_gpus, cycles=3, now=now)
        seed_repairs(store, now)
        seed_cluster(store, now)
        seed_straggler(store, now)
        bulk_incidents(store, incidents, days=days, now=now)
        return _history(store, now, days)
    finally:
        store.close()


def _render(settings: Path, page: str, cold: bool, month: bool) -> float:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=120)
    at.session_state[SETTINGS_KEY] = str(settings)
    at.run()
    at.switch_page(f"page_files/{page}.py")
    if page == "utilization" and month:
        today = datetime.now(UTC).date()
        at.session_state["util_period"] = (today - timedelta(days=29), today)
    if page == "incidents" and month:
        at.session_state["inc_period"] = "30 days"
    if cold:
        data.changed()
    t0 = time.perf_counter()
    at.run()
    took = time.perf_counter() - t0
    assert not at.exception, (page, at.exception)
    if page in ("fleet", "utilization"):
        assert at.metric, f"{page}: nothing to show"  # measured with data, not an empty page
    return took


def run(runs: int, quick: bool) -> str:
    from harness.dashboard_seed import write_settings

    n_gpus, incidents, days = (1000, 3000, 3) if quick else (10_000, 30_000, 30)
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'journal.db'}"
        t0 = time.perf_counter()
        history = seed(url, n_gpus, incidents, days)
        seeded = time.perf_counter() - t0
        settings = write_settings(
            Path(tmp) / "s.json", url, "bench", unauthenticated_approvals=True
        )
        cases = [(p, False) for p in PAGES] + [("incidents", True), ("utilization", True)]
        for page, month in cases:
            cold = [_render(settings, page, True, month) for _ in range(runs)]
            warm = [_render(settings, page, False, month) for _ in range(runs)]
            label = page + (" (30 days)" if month else "")
            rows.append([label, f"**{median(cold):.2f}**", f"{max(cold):.2f}",
                         f"{median(warm):.2f}"])  # fmt: skip
    header = ["page", "cold median s", "cold max s", "warm median s"]
    return "\n".join(
        [
            stamp(),
            "",
            table(header, rows),
            "",
            f"{n_gpus:,} GPUs, {incidents:,} incidents over {days} days, {history:,} rollup rows "
            f"of history (seeded in {seeded:.0f} s); median of {runs} renders per case. Target: "
            "≤ 2 s per page. *Incidents* shows 24 h by default and *Utilization & cost* 7 days; "
            "the (30 days) rows are the same pages over the whole month. The browser draws the "
            "charts after this (Vega-Lite, client side).",
        ]
    )
