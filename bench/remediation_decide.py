"""Benchmark: the remediation engine deciding on 10,000 findings (issue 5: <= 1 s).

Fleet: 12,500 GPU nodes x 8 GPUs (100k GPUs) in 5 pools, one pod per node. Findings: 10,000 on
the 8 GPUs of 1,250 nodes (10 % of the fleet, below the breaker), a mix of critical XIDs, warning
throttles and info idles, so every default-policy rule is evaluated and gated.

Timed (inputs built first, untimed; `time.perf_counter`):
- `decide` (pure): the first cycle (10k findings open 10k incidents) and a steady cycle (all open
  already, nothing new);
- `RemediationEngine.cycle` with the journal (in-memory SQLite and a SQLite file): the same two
  cycles, including loading the journal and persisting incidents, decisions and audit rows.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.report import median, stamp, table
from detectors.findings import Finding, FindingKind, Severity
from remediations.decide import JournalSummary, Memory, decide
from remediations.engine import RemediationEngine
from remediations.incidents import TrackerState
from remediations.policy import load_policy
from remediations.store import Store
from remediations.store.records import EngineState
from remediations.view import ClusterView, NodeView, PodView

TITLE = "Remediation decide (remediations.decide / engine)"
T0 = 1_700_000_000.0
TARGET_SECONDS = 1.0


def fleet(nodes: int) -> ClusterView:
    ns = {
        f"p{i % 5}-{i:05d}": NodeView(
            f"p{i % 5}-{i:05d}", {"gpufleet.io/pool": f"p{i % 5}"}, gpu_count=8
        )
        for i in range(nodes)
    }
    pods = {
        f"ml/w-{i}": PodView("ml", f"w-{i}", name, f"u{i}", owner_kind="StatefulSet")
        for i, name in enumerate(ns)
    }
    return ClusterView(ns, pods)


def findings(view: ClusterView, n: int, t: float) -> list[Finding]:
    names = list(view.nodes)
    out = []
    for i in range(n):
        node = names[(i // 8) * 10 % len(names)]
        kind, sev = [
            (FindingKind.GPU_XID, Severity.CRITICAL),
            (FindingKind.GPU_THROTTLE, Severity.WARNING),
            (FindingKind.GPU_IDLE, Severity.INFO),
            (FindingKind.GPU_MEMORY, Severity.WARNING),
        ][i % 4]
        out.append(
            Finding(
                kind,
                sev,
                f"{kind.value} on {node}",
                T0,
                t,
                node=node,
                gpu_uuid=f"GPU-{node}-{i % 8}",
            )
        )
    return out


def _time(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def run(runs: int = 7, quick: bool = False) -> str:
    n_nodes, n_findings = (2_000, 2_000) if quick else (12_500, 10_000)
    view = fleet(n_nodes)
    policy = load_policy()
    state = EngineState("bench")
    fs = findings(view, n_findings, T0)
    fs2 = findings(view, n_findings, T0 + 30)
    mem0 = Memory(TrackerState("bench"))
    first = decide(policy, fs, view, T0, mem0, state, JournalSummary())
    rows = []

    def row(name: str, times: list[float], note: str) -> None:
        m = median(times)
        ok = "yes" if m <= TARGET_SECONDS else "NO"
        rows.append(
            [
                name,
                f"{m * 1000:.0f} ms",
                f"{min(times) * 1000:.0f} ms",
                f"{max(times) * 1000:.0f} ms",
                ok,
                note,
            ]
        )

    row(
        "decide, first cycle",
        _time(lambda: decide(policy, fs, view, T0, mem0, state, JournalSummary()), runs),
        f"{len(first.changes)} incidents opened, {len(first.decisions)} decisions",
    )
    steady = decide(policy, fs2, view, T0 + 30, first.memory, state, JournalSummary())
    row(
        "decide, steady cycle",
        _time(
            lambda: decide(policy, fs2, view, T0 + 30, first.memory, state, JournalSummary()), runs
        ),
        f"{len(steady.decisions)} new decisions",
    )

    with tempfile.TemporaryDirectory() as tmp:
        for label, url in (
            ("in-memory SQLite", "sqlite://"),
            ("SQLite file", f"sqlite:///{Path(tmp) / 'j.db'}"),
        ):
            firsts, steadies = [], []
            for r in range(runs):
                store = Store.open(url if url == "sqlite://" else url + str(r), cluster="bench")
                eng = RemediationEngine(policy, store, started_at=T0 - 60)
                firsts += _time(lambda eng=eng: eng.cycle(fs, view, T0), 1)
                steadies += _time(lambda eng=eng: eng.cycle(fs2, view, T0 + 30), 1)
                store.close()
            row(f"engine.cycle, first ({label})", firsts, "incl. journal writes")
            row(f"engine.cycle, steady ({label})", steadies, "incl. journal reads")
    head = ["case", "median", "min", "max", f"<= {TARGET_SECONDS:g} s", "notes"]
    return (
        f"{stamp()}\n\n{n_findings:,} findings on {n_nodes:,} GPU nodes "
        f"({n_nodes * 8:,} GPUs), default policy, {runs} runs.\n\n{table(head, rows)}\n\n"
        "`decide` is the pure function backtest and the live engine share; `engine.cycle` adds "
        "the journal (incident upserts, action rows, audit rows).\n"
    )


if __name__ == "__main__":
    print(run(runs=5))
