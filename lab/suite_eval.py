"""`gpufleet eval`: score the detectors, and the static dcgm-exporter rules, on a scenario suite.

For each scenario file: simulate it, write OpenMetrics, backfill a throwaway Prometheus
(lab.local_prometheus), replay it through the Prometheus collector exactly as `backtest`
does (backtesting.backtest.replay_window; the detectors and the static-rule baseline side by side
from one pass), and score both against the scenario's ground truth (lab.scoring). The
Prometheus is stopped when the scenario is done, also on an error or Ctrl-C.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backtesting.backtest import Progress, replay_window, step_count
from detectors.suite import DetectorSuite
from errors import ConfigError
from lab.baseline import static_rules_suite
from lab.local_prometheus import start_prometheus, write_scenario
from lab.scoring import Score, merge, score
from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.plan import PromSettings
from simulator.engine import FleetSimulator
from simulator.scenario import Scenario, load_scenario
from simulator.truth import ground_truth

TARGET_PRECISION = 0.95
TARGET_RECALL = 0.95
TARGET_KIND_RECALL = 0.90


def scenario_files(suite_dir: str | Path) -> list[Path]:
    """The suite's scenario files (*.yaml, *.yml), sorted; ConfigError when there are none."""
    d = Path(suite_dir)
    if not d.is_dir():
        raise ConfigError(str(d), ["not a directory (expected a directory of scenario YAML files)"])
    files = sorted([*d.glob("*.yaml"), *d.glob("*.yml")])
    if not files:
        raise ConfigError(str(d), ["no scenario files (*.yaml) in this directory"])
    return files


@dataclass(frozen=True, slots=True)
class ScenarioEval:
    name: str
    file: str
    gpus: int
    steps: int
    seconds: float
    detectors: Score
    static_rules: Score
    detector_failures: int
    confounder_kinds: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "file": self.file,
            "gpus": self.gpus,
            "steps": self.steps,
            "seconds": round(self.seconds, 2),
            "detector_failures": self.detector_failures,
            "detectors": self.detectors.to_json(),
            "static_rules": self.static_rules.to_json(),
        }


def evaluate_scenario(
    sc: Scenario,
    file: str,
    workdir: Path,
    suite: DetectorSuite,
    grace_cycles: int = 0,
    lookback_delta: str | None = None,
    log: Callable[[str], None] | None = None,
    child_setup: Callable[[], None] | None = None,
) -> ScenarioEval:
    """Simulate, backfill, replay and score one scenario (`child_setup`: as start_prometheus)."""
    say = log or (lambda _m: None)
    began = time.perf_counter()
    sim = FleetSimulator(sc)
    om = workdir / f"{sc.name}.om"
    say(f"{sc.name}: simulating {sc.gpu_count} GPUs over {sc.duration / 60:.0f} min")
    write_scenario(sc, om)
    say(f"{sc.name}: backfilling a local Prometheus")
    step = sc.scrape_interval
    start, end = sc.start + step, sc.end
    with start_prometheus(om, workdir, lookback_delta, child_setup=child_setup) as prom:
        om.unlink()
        total = step_count(start, end, step)
        say(f"{sc.name}: replaying {total} steps through the Prometheus collector")
        with PrometheusCollector(PromSettings(prom.url, timeout=30.0)) as c:
            run = replay_window(
                c, start, end, step,
                [(suite, grace_cycles), (static_rules_suite(), 0)],
                Progress(total, label=f"eval {sc.name}"),
            )  # fmt: skip
    truth = ground_truth(sc, sim.layout)
    det, base = run.results
    return ScenarioEval(
        sc.name, file, sc.gpu_count, run.steps, time.perf_counter() - began,
        score(det.episodes, truth), score(base.episodes, truth), len(det.failures),
        tuple(sorted({c["kind"] for c in truth["confounders"]})),
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class SuiteEval:
    suite: str
    scenarios: tuple[ScenarioEval, ...]

    @property
    def confounder_kinds(self) -> list[str]:
        return sorted({k for s in self.scenarios for k in s.confounder_kinds})

    @property
    def detectors(self) -> Score:
        return merge(s.detectors for s in self.scenarios)

    @property
    def static_rules(self) -> Score:
        return merge(s.static_rules for s in self.scenarios)

    def misses(self) -> list[str]:
        """The issue's targets the detectors missed (empty: all met). Recall is judged on the
        faults above each detector's published limit (lab.fault_size); faults below it
        are reported in the size table, not held to the target."""
        s = self.detectors
        out = []
        if s.precision < TARGET_PRECISION:
            out.append(f"precision {s.precision:.3f} < {TARGET_PRECISION}")
        if s.recall_above_limit < TARGET_RECALL:
            out.append(f"recall above limits {s.recall_above_limit:.3f} < {TARGET_RECALL}")
        for k, (n, found) in sorted(s.above_limit_by_kind().items()):
            if n and found / n < TARGET_KIND_RECALL:
                out.append(f"recall of {k} above its limit {found / n:.2f} < {TARGET_KIND_RECALL}")
        n_conf = sum(s.fp_by_confounder.values())
        if n_conf:
            out.append(f"{n_conf} warning/critical findings on confounders (target 0)")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "scenarios": [s.to_json() for s in self.scenarios],
            "overall": {
                "detectors": self.detectors.to_json(),
                "static_rules": self.static_rules.to_json(),
            },
            "targets": {
                "precision": TARGET_PRECISION,
                "recall": TARGET_RECALL,
                "recall_per_fault_kind": TARGET_KIND_RECALL,
                "confounder_findings": 0,
                "met": not self.misses(),
                "missed": self.misses(),
            },
        }


def evaluate_suite(
    suite_dir: str | Path,
    suite: DetectorSuite,
    grace_cycles: int = 0,
    lookback_delta: str | None = None,
    log: Callable[[str], None] | None = None,
    files: Sequence[Path] | None = None,
    child_setup: Callable[[], None] | None = None,
) -> SuiteEval:
    """Every scenario of the suite, one local Prometheus at a time (each stopped after use;
    `child_setup` runs in each before exec: `gpufleet eval` ties their lives to its own)."""
    paths = list(files) if files is not None else scenario_files(suite_dir)
    scenarios = [(p, load_scenario(p)) for p in paths]  # all validated before any work
    out: list[ScenarioEval] = []
    eta = SuiteEta([step_count(sc.start + sc.scrape_interval, sc.end, sc.scrape_interval)
                    for _, sc in scenarios])  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="gpufleet-eval-") as tmp:
        for path, sc in scenarios:
            work = Path(tmp) / sc.name
            work.mkdir(parents=True, exist_ok=True)
            out.append(
                evaluate_scenario(
                    sc, str(path), work, suite, grace_cycles, lookback_delta, log, child_setup
                )
            )
            if log is not None:
                log(eta.scenario_done(out[-1].seconds))
    return SuiteEval(str(suite_dir), tuple(out))


@dataclass
class SuiteEta:
    """The suite's time left, from the seconds per replay step of the scenarios done so far
    (a scenario's cost grows with its steps; GPU count differences average out)."""

    steps: list[int]
    done: int = 0
    seconds: float = 0.0

    def scenario_done(self, seconds: float) -> str:
        self.done += 1
        self.seconds += seconds
        n = len(self.steps)
        if self.done >= n:
            return f"{n}/{n} scenarios done in {self.seconds:.0f} s"
        per_step = self.seconds / max(1, sum(self.steps[: self.done]))
        left = per_step * sum(self.steps[self.done :])
        return f"{self.done}/{n} scenarios done in {self.seconds:.0f} s, ~{left:.0f} s left"


def stderr_log(message: str) -> None:
    print(f"gpufleet eval: {message}", file=sys.stderr, flush=True)
