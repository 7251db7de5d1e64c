"""Benchmark: a week of 10k GPUs at 30 s steps (issue 25: <= 10 min), from its cost per step.

Backfilling a week of 10k GPUs (~3 billion samples, days of OpenMetrics writing at this
machine's pace) is not possible here, as the issue allows: the simulator writes `HOURS` of the
10k-GPU fleet (untimed; kept between runs like bench.backtest_day's), and
`backtesting.backtest.backtest` — the sequential replay, collection,
detectors and dry-run policy — replays windows of 1/3, 2/3 and all of it, `REPEATS` times each.
A straight line through (steps, median seconds) gives the cost per step and the fixed cost; how
well it fits says whether the cost is linear in steps. The week is then that line at 20,160
steps, and, where the command's default takes more than one shard (one per two CPUs:
backtesting.backtest_sharded), that line at each shard's steps plus its warm-up (gpu_idle's
4.5 h), on one core per shard.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np

from backtesting.backtest import backtest, step_count
from backtesting.backtest_sharded import default_shards
from backtesting.sharded import warmup_seconds
from bench.backtest_day import STEP, build_tsdb
from bench.performance_doc import median, missed_by, stamp, table
from bench.prom_collect import process_cpu
from detectors.suite import DetectorSuite
from gpufleet.children import die_with_this_process
from lab.local_prometheus import start_prometheus
from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.plan import PromSettings

TITLE = "Backtest: a week of 10k GPUs (cost per step, extrapolated)"
GPUS = 10_000
HOURS = 1.0
QUICK_HOURS = 0.5
REPEATS = 3
WEEK = 7 * 86_400.0
TARGET_SECONDS = 600.0


def _header(repeats: int) -> list[str]:
    return ["GPUs", "steps (30 s)", f"backtest s (median of {repeats})", "min–max s",
            "CPU s (backtest process)", "of it detectors s", "CPU s (Prometheus)",
            "ms per step", "line s"]  # fmt: skip


def run(runs: int = 7, quick: bool = False) -> str:
    hours = QUICK_HOURS if quick else HOURS
    repeats = max(1, min(runs, REPEATS))
    with tempfile.TemporaryDirectory(prefix="bench-week-") as tmp:
        sc, data, prep_s, samples = build_tsdb(hours, Path(tmp), GPUS)
        prom = start_prometheus(None, Path(tmp), data_dir=data, child_setup=die_with_this_process())
        try:
            settings = PromSettings(prom.url, timeout=120.0)
            start = sc.start + STEP
            span = sc.end - start
            points: list[tuple[int, float, float, list[float], float, float]] = []
            with PrometheusCollector(settings) as c:  # untimed: imports, first forest fit
                backtest(c, start, start + 10 * STEP, STEP, DetectorSuite.default(), 0, None)
            for frac in (1 / 3, 2 / 3, 1.0):
                end = start + round(span * frac / STEP) * STEP
                walls, cpus, dets, proms = [], [], [], []
                for _ in range(repeats):
                    p0 = process_cpu(prom.process.pid)
                    c0, t0 = time.process_time(), time.perf_counter()
                    with PrometheusCollector(settings) as c:
                        result = backtest(c, start, end, STEP, DetectorSuite.default(), 0, None)
                    walls.append(time.perf_counter() - t0)
                    cpus.append(time.process_time() - c0)
                    proms.append(process_cpu(prom.process.pid) - p0)
                    dets.append(result.run.results[0].detector_seconds)
                    print(f"   {step_count(start, end, STEP)} steps: {walls[-1]:.1f} s", flush=True)
                n = step_count(start, end, STEP)
                points.append((n, median(walls), median(cpus), walls, median(dets), median(proms)))
        finally:
            prom.stop()
    steps = np.array([p[0] for p in points], dtype=float)
    medians = np.array([p[1] for p in points])
    slope, fixed = np.polyfit(steps, medians, 1)
    fitted = slope * steps + fixed
    worst = float(np.max(np.abs(fitted - medians) / medians))
    week_steps = int(WEEK // STEP) + 1
    week_seq = slope * week_steps + fixed
    k = default_shards()
    warm_steps = int(warmup_seconds(DetectorSuite.default()) // STEP)
    week_sharded = week_seq if k == 1 else slope * (week_steps / k + warm_steps) + fixed
    how = (
        "sequentially (one shard per two CPUs: `gpufleet backtest`'s default here)"
        if k == 1
        else f"in {k} shards ({week_steps // k:,} steps + {warm_steps} warm-up each, one core each)"
    )
    rows = [
        [f"{GPUS:,}", f"{n:,}", f"**{w:.1f}**", f"{min(ws):.1f}–{max(ws):.1f}", f"{c:.1f}",
         f"{d:.1f}", f"{pc:.1f}", f"{1000 * w / n:.0f}", f"{fitted[i]:.1f}"]
        for i, (n, w, c, ws, d, pc) in enumerate(points)
    ]  # fmt: skip
    met = missed_by(week_sharded, TARGET_SECONDS, "s")
    return "\n".join(
        [
            stamp(),
            "",
            table(_header(repeats), rows),
            "",
            f"Cost per step: {1000 * slope:.0f} ms, fixed {fixed:.1f} s; the line is within "
            f"{100 * worst:.0f} % of every median "
            f"({'linear in steps' if worst <= 0.15 else 'NOT linear: read the rows'}).",
            _where(points[-1], week_steps),
            "",
            f"Target (issue 25): 7 days of 10k GPUs at 30 s ({week_steps:,} steps) <= "
            f"{TARGET_SECONDS / 60:.0f} min -> extrapolated {week_sharded / 60:.0f} min {how} "
            f"({met}); sequential {week_seq / 60:.0f} min. Extrapolated from the line above, "
            "not measured.",
            "",
            f"Data: `bench.prom_collect.fleet_scenario({GPUS})` over {hours:g} h at 30 s "
            f"({samples:,} samples, written and backfilled in {prep_s:.0f} s, untimed); "
            f"sequential `backtesting.backtest.backtest` with the default detectors and the "
            f"shipped policy in dry-run; load average {os.getloadavg()[0]:.1f} at the end (2 "
            "shared cores: wall time is above CPU time).",
        ]
    )


def _where(point: tuple[int, float, float, list[float], float, float], week_steps: int) -> str:
    """Where a step's time goes in the longest window's median run, and what Prometheus alone
    would spend on a week: the part no change in this process can remove."""
    n, wall, cpu, _, det, prom_cpu = point
    return (
        f"Where a step goes ({n} steps, medians): {1000 * wall / n:.0f} ms wall; the backtest "
        f"process {1000 * cpu / n:.0f} ms CPU, of it the detectors {1000 * det / n:.0f} ms "
        f"(the rest: collection — grids and snapshots — and decisions); Prometheus "
        f"{1000 * prom_cpu / n:.0f} ms CPU answering the range selectors as JSON, on the other "
        f"core: {prom_cpu / n * week_steps / 60:.0f} min of Prometheus CPU for a week by itself."
    )
