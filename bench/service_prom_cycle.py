"""Benchmark: the service's live cycle on a Prometheus source, beside the collector's own cycle.

The same real Prometheus holding a simulated fleet (bench.prom_collect's scenario and backfill),
the same instants: first `PrometheusCollector.collect(t)` alone (what `prom_collect` times), then
the live cycle `gpufleet run` runs on `service.source.prometheus` (gpufleet.live_cycle with
`prometheus_source`: collect + the default detectors + incidents and shadow decisions journaled
in SQLite), each warm, in time order 30 s apart. Nodes and pods come from kube-state-metrics in
Prometheus (no Kubernetes API here: the service_cycle bench measures that side), so the two rows
differ by detection and the journal only.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from bench.performance_doc import median, stamp, table
from bench.prom_collect import STEP, _progress, fleet_scenario
from detectors.suite import DetectorSuite
from gpufleet.children import die_with_this_process
from gpufleet.live_cycle import LiveCycle, prometheus_source
from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.plan import PromSettings
from remediations.cycle import RemediationCycle
from remediations.policy import load_policy
from remediations.store import Store
from simulator.engine import FleetSimulator
from simulator.openmetrics import OpenMetricsWriter

TITLE = "Service cycle on a Prometheus source (gpufleet run, service.source.prometheus)"
SIZES = (10_000,)
QUICK_SIZES = (1_000,)


class _NoActuator:
    """Shadow policy: nothing is written; the engine's view of the cluster comes from the
    snapshot (the live cycle builds it, as in the service), never from this."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"actuator.{name} called in shadow mode")


def measure(n_gpus: int, runs: int, tmp: Path) -> list[list[object]]:
    from lab.local_prometheus import start_prometheus

    sc = fleet_scenario(n_gpus)
    om = tmp / f"fleet-{n_gpus}.om"
    OpenMetricsWriter(FleetSimulator(sc)).write(om, progress=_progress(f"{n_gpus} GPUs"))
    prom = start_prometheus(om, tmp / f"p{n_gpus}", child_setup=die_with_this_process())
    om.unlink()
    rows: list[list[object]] = []
    try:
        at = sc.end
        times = [at - (runs - 1 - k) * STEP for k in range(runs)]
        settings = PromSettings(prom.url, timeout=30.0, cluster="bench")
        with PrometheusCollector(settings) as c:
            c.collect(times[0] - STEP)  # cold start, untimed
            bare: list[float] = []
            gpus = 0
            for t in times:
                t0 = time.perf_counter()
                r = c.collect(t)
                bare.append(time.perf_counter() - t0)
                gpus = len(r.snapshot.gpus)
        store = Store.open(f"sqlite:///{tmp / f'j-{n_gpus}.db'}", cluster="bench")
        now = [times[0] - STEP]
        with PrometheusCollector(settings, now=lambda: now[0]) as c:
            loop = RemediationCycle(
                load_policy(), store, _NoActuator(), "bench", started_at=now[0] - 600
            )
            cycle = LiveCycle(prometheus_source(c), DetectorSuite.default(), loop)
            cycle.run_once(now[0])  # cold start, untimed
            svc: list[float] = []
            findings = 0
            for t in times:
                now[0] = t
                t0 = time.perf_counter()
                report = cycle.run_once(t)
                svc.append(time.perf_counter() - t0)
                assert report.ok, report.errors
                findings = len(report.findings)
        store.close()
    finally:
        prom.stop()
    rows.append([f"{gpus:,}", "collector only (`collect(t)`)", f"**{median(bare):.2f}**",
                 f"{min(bare):.2f}–{max(bare):.2f}", ""])  # fmt: skip
    rows.append([f"{gpus:,}", "service live cycle (collect + detect + journal)",
                 f"**{median(svc):.2f}**", f"{min(svc):.2f}–{max(svc):.2f}",
                 f"{findings}"])  # fmt: skip
    return rows


def run(runs: int = 7, quick: bool = False) -> str:
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory(prefix="bench-svc-prom-") as tmp:
        for n in QUICK_SIZES if quick else SIZES:
            print(f"   {n:,} GPUs ...", flush=True)
            rows += measure(n, runs, Path(tmp))
    head = ["GPUs", "what", f"median s ({runs} warm cycles)", "min–max s", "findings/cycle"]
    return (
        f"{stamp()}\n\n"
        + table(head, rows)
        + "\n\nBoth rows read the same backfilled Prometheus at the same instants (20 minutes "
        "of the fleet at 30 s, cycles 30 s apart at the window's end, warm). The service row is "
        "`LiveCycle(prometheus_source(collector))` with the default detectors and the shipped "
        "shadow policy journaling into SQLite; kube-state-metrics stands in for the Kubernetes "
        "API."
    )
