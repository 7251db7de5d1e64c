"""Benchmark: Kubernetes API requests and wall time per `gpufleet run` cycle (issue 12: read
Kubernetes once; steady state: watches only, no LIST).

Fleet: the simulator's Kubernetes API serving N GPU nodes (8 GPUs each, the GPU operator's two
DaemonSet pods per node, an inference workload on a tenth of the nodes), N = 1,250 and 12,500.
The live cycle is the service's: the watch-backed Kubernetes collector (synced before timing),
direct scrape, the default detectors, the remediation loop with the default policy. Exporter
scraping is limited to 16 nodes' pages (the scrape benchmark covers scraping at scale); the
Kubernetes side is the whole fleet.

Two ways of handing the cluster to the remediation engine, same cycle otherwise:
- `service`: gpufleet.service.actuator.CachedActuator, the view built from the snapshot the
  cycle just collected (the collector's watch cache);
- `list per tick`: the plain KubeActuator, which LISTs nodes and pods for the engine and again
  for the runner every tick (what `gpufleet demo` did before).
Requests are counted by the simulated API server per verb and resource (`/_sim/requests`);
watch requests are the collector's long polls being renewed (server timeout 60 s).

Issue 25's target: the `service` cycle at 12,500 nodes <= 1 s. Each row also gives the median
process CPU time per cycle (the simulated API server runs in this process too, idle in steady
state), and one extra `service` cycle at the largest size is profiled (cProfile) to say where
the time goes. `list per tick` is measured at the smaller size only since issue 25: at 12,500
nodes it took ~95 s per cycle (docs/performance.md, 2026-12-02), ten minutes of the shared
machine per run for a comparison that does not change.
"""

from __future__ import annotations

import time
from typing import Any

from bench.performance_doc import median, missed_by, own_time, stamp, table
from detectors.suite import DetectorSuite
from gpufleet.live_cycle import LiveCycle, scrape_source
from gpufleet.service.actuator import CachedActuator, SnapshotCache
from kube.actuator import KubeActuator
from observer.kube.collector import KubeCollector, KubeSettings
from observer.scrape.collector import ScrapeCollector, ScrapeSettings
from remediations.capabilities import LiveActuator
from remediations.cycle import RemediationCycle
from remediations.policy import load_policy
from remediations.store import Store
from simulator.scenario import scenario_from_dict
from simulator.serve import start_simulation

TITLE = "Service cycle: Kubernetes API requests per cycle (gpufleet run)"


def _scenario(nodes: int) -> Any:
    return scenario_from_dict(
        {
            "name": f"svc-{nodes}",
            "cluster": "bench",
            "start": float(int(time.time())),
            "duration": "2h",
            "pools": [{"name": "h100", "model": "H100", "nodes": nodes, "gpus_per_node": 8}],
            "workloads": [
                {"name": "serve", "kind": "inference", "namespace": "serving", "pool": "h100",
                 "replicas": max(1, nodes // 10), "gpus_per_pod": 8},
            ],
        },
        "bench",
    )  # fmt: skip


TARGET_NODES = 12_500
TARGET_SECONDS = 1.0


def _measure(
    nodes: int, runs: int, tmp: str, modes: tuple[str, ...], found: dict[str, object]
) -> list[list[object]]:
    """Rows per mode; `found` gets the `service` median and profile at this size."""
    h = start_simulation(_scenario(nodes), kubeconfig_out=f"{tmp}/kc-{nodes}")
    rows: list[list[object]] = []
    try:
        kube = KubeCollector(KubeSettings(kubeconfig=f"{tmp}/kc-{nodes}")).start()
        t0 = time.perf_counter()
        if not kube.wait_synced(600):
            raise RuntimeError("collector never synced")
        sync = time.perf_counter() - t0
        scrape = ScrapeCollector(ScrapeSettings(targets=tuple(h.targets()[:16]), cluster="bench"))
        plain = KubeActuator.from_kubeconfig(f"{tmp}/kc-{nodes}")
        try:
            for mode in modes:
                store = Store.open("sqlite://", cluster="bench")
                cache = SnapshotCache()
                actuator: LiveActuator = (
                    CachedActuator(plain, cache, None) if mode == "service" else plain
                )
                loop = RemediationCycle(
                    load_policy(), store, actuator, "bench", started_at=time.time()
                )
                cycle = LiveCycle(
                    cache.wrap(scrape_source(scrape, kube)), DetectorSuite.default(), loop
                )
                cycle.run_once(time.time())  # warm-up (first scrape, detector state)
                h.k8s.request_counts(reset=True)
                secs: list[float] = []
                cpus: list[float] = []
                counts: dict[str, int] = {}
                for _ in range(runs):
                    c, t = time.process_time(), time.perf_counter()
                    report = cycle.run_once(time.time())
                    secs.append(time.perf_counter() - t)
                    cpus.append(time.process_time() - c)
                    assert report.ok, report.errors
                    for k, n in h.k8s.request_counts(reset=True).items():
                        counts[k] = counts.get(k, 0) + n
                per = {k: n / runs for k, n in sorted(counts.items())}
                lists = sum(v for k, v in per.items() if k.startswith("list "))
                rows.append(
                    [
                        f"{nodes:,}",
                        f"{nodes * 2 + max(1, nodes // 10):,}",
                        mode,
                        f"{sum(per.values()):.1f}",
                        f"{lists:.1f}",
                        ", ".join(f"{k} {v:.1f}" for k, v in per.items()) or "none",
                        f"**{median(secs):.2f}**",
                        f"{min(secs):.2f}–{max(secs):.2f}",
                        f"{median(cpus):.2f}",
                        f"{sync:.1f}",
                    ]
                )
                if mode == "service":
                    found["median"], found["cpu"] = median(secs), median(cpus)
                    found["profile"] = own_time(cycle.run_once, time.time())
                store.close()
        finally:
            plain.close()
            scrape.close()
            kube.stop()
    finally:
        h.stop()
    return rows


def run(runs: int, quick: bool) -> str:
    import tempfile

    sizes = [125] if quick else [1_250, TARGET_NODES]
    rows: list[list[object]] = []
    found: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            modes = ("service",) if n >= TARGET_NODES else ("service", "list per tick")
            rows += _measure(n, runs, tmp, modes, found)
    head = [
        "nodes", "pods", "engine's view", "API requests / cycle", "LIST / cycle",
        "by verb and resource (per cycle)", "cycle s (median)", "min–max",
        "CPU s per cycle (median)", "initial sync s",
    ]  # fmt: skip
    wall, cpu = float(str(found["median"])), float(str(found["cpu"]))
    target = (
        f"\n\nIssue 25's target: the service cycle at {sizes[-1]:,} nodes from the watch cache "
        f"<= {TARGET_SECONDS:g} s -> {wall:.2f} s wall "
        f"({missed_by(wall, TARGET_SECONDS, 's', 2)}), "
        f"{cpu:.2f} s CPU ({missed_by(cpu, TARGET_SECONDS, 's', 2)})."
        f"\n\nWhere one `service` cycle's time goes at {sizes[-1]:,} nodes (cProfile, own time, "
        f"under the profiler's overhead): {found['profile']}."
    )
    return (
        f"{stamp()}\n\n"
        + table(head, rows)
        + target
        + "\n\nTarget: steady state makes no LIST (watches only). `service` is what "
        "`gpufleet run` does; `list per tick` is the plain actuator for comparison. "
        f"{runs} cycles per row after one warm-up cycle; exporter scraping limited to 16 nodes "
        "(see *Scrape collection* for scraping at scale), the Kubernetes side is the whole fleet; "
        "no findings, so the runner has nothing to execute (a write's own reads, such as pinning "
        "pod UIDs before an eviction, still go to the API)."
    )
