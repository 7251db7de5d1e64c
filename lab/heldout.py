"""`python -m lab.heldout FIRST COUNT`: held-out scenarios (lab/scenario_gen.py), scored.

Generates COUNT scenarios from seeds FIRST.. (never in the suite), replays each on the simulated
path with the rule detectors (anomaly raises info only and cannot change these figures), and
prints markdown: per finding kind precision, per fault kind recall and time to detect above and
below each detector's published limit (lab.fault_size), off-kind findings, warnings on
confounders and every miss. By hand (seconds per seed); docs/backtest.md has the figures.
"""

from __future__ import annotations

import statistics
import sys
from collections import Counter, defaultdict

from detectors.findings import Severity
from detectors.suite import DetectorSuite
from lab.scenario_gen import random_scenario
from lab.scoring import UNSCORED, FaultResult
from lab.simulated import evaluate


def _ttd(rs: list[FaultResult]) -> str:
    t = [r.ttd for r in rs if r.found and r.ttd is not None]
    return f"{statistics.median(t):.0f} s / {max(t):.0f} s" if t else "-"


def main(first: int, count: int) -> str:
    rules = DetectorSuite.default([n for n in DetectorSuite.default().names if n != "anomaly"])
    faults: list[FaultResult] = []
    flagged: Counter[str] = Counter()
    false: Counter[str] = Counter()
    off: Counter[str] = Counter()
    confounder_pages: Counter[str] = Counter()
    misses: list[str] = []
    gpus = 0
    for seed in range(first, first + count):
        sc = random_scenario(seed)
        gpus += sc.gpu_count
        res = evaluate(sc, rules)
        s = res.score
        faults.extend(s.faults)
        for ep in res.result.episodes:
            if ep.severity.rank >= Severity.WARNING.rank and ep.kind not in UNSCORED:
                flagged[ep.kind.value] += 1
        false.update(f.kind.value for f in s.false_positives)
        off.update(f.kind.value for f in s.off_kind)
        confounder_pages.update(s.fp_by_confounder)
        misses += [
            f"seed {seed} {r.id} {r.kind} {r.size.value:g} {r.size.unit} "
            f"({'above' if r.size.above_limit else 'below'} the limit {r.size.limit:g})"
            for r in s.faults
            if not r.found and r.size.value is not None and r.size.limit is not None
        ] + [
            f"seed {seed} {r.id} {r.kind}" for r in s.faults if not r.found and r.size.value is None
        ]
    out = [f"{count} held-out scenarios, seeds {first}-{first + count - 1}, {gpus:,} GPUs", ""]
    out += ["| finding kind | warning/critical episodes | true | false | off-kind | precision |"]
    out += ["|---|---:|---:|---:|---:|---:|"]
    for kind, n in sorted(flagged.items()):
        true = n - false[kind] - off[kind]
        prec = true / (true + false[kind]) if true + false[kind] else 1.0
        out.append(f"| {kind} | {n} | {true} | {false[kind]} | {off[kind]} | {prec:.2f} |")
    out += ["", "| fault kind | above limit: found | recall | TTD median / max | "
            "below limit: found |", "|---|---:|---:|---:|---:|"]  # fmt: skip
    by: defaultdict[str, list[FaultResult]] = defaultdict(list)
    for r in faults:
        by[r.kind].append(r)
    for kind, rs in sorted(by.items()):
        above = [r for r in rs if r.size.above_limit]
        below = [r for r in rs if not r.size.above_limit]
        found = sum(r.found for r in above)
        rec = f"{found / len(above):.2f}" if above else "-"
        low = f"{sum(r.found for r in below)}/{len(below)}" if below else "-"
        out.append(f"| {kind} | {found}/{len(above)} | {rec} | {_ttd(above)} | {low} |")
    above = [r for r in faults if r.size.above_limit]
    tp = sum(flagged.values()) - sum(false.values()) - sum(off.values())
    out += [
        "",
        f"above the limits: recall {sum(r.found for r in above) / len(above):.3f} "
        f"({sum(r.found for r in above)}/{len(above)}); precision "
        f"{tp / (tp + sum(false.values())) if tp + sum(false.values()) else 1.0:.3f}; "
        f"warning/critical on confounders: {dict(confounder_pages) or 0}",
        "",
        "misses: " + ("; ".join(misses) or "none"),
    ]
    return "\n".join(out)


if __name__ == "__main__":
    print(main(int(sys.argv[1]), int(sys.argv[2])))
