"""Soak: the remediation lifecycle's stateful property test, run far longer than CI runs it.

`tests/service/test_lifecycle_stateful.py` (Hypothesis `RuleBasedStateMachine` over the real
journal, gates, executor, playbooks, hold reconciler and `diagnose_and_return` against the
simulator's Kubernetes API) runs in CI with a fixed budget. Here it runs in its own pytest
process (bench never imports the tests) with `GPUFLEET_STATEFUL_EXAMPLES` sequences of up to
`GPUFLEET_STATEFUL_STEPS` steps; the section records how many sequences and steps ran, the wall
time and whether every invariant held (a failure prints Hypothesis' shrunk sequence).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from bench.performance_doc import stamp, table

TITLE = "Lifecycle stateful soak (tests/service/test_lifecycle_stateful.py)"
ROOT = Path(__file__).resolve().parents[1]
TEST = "tests/service/test_lifecycle_stateful.py"


def soak(examples: int, steps: int) -> tuple[str, int, int, float, str, str]:
    env = {
        **os.environ,
        "GPUFLEET_STATEFUL_EXAMPLES": str(examples),
        "GPUFLEET_STATEFUL_STEPS": str(steps),
    }
    t = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "--timeout=0",
         TEST],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - t
    got = re.search(r"stateful: (\d+) examples, (\d+) steps", done.stdout)
    ran = (int(got.group(1)), int(got.group(2))) if got else (0, 0)
    seen = re.search(r"stateful: journaled (.*)", done.stdout)
    verdict = "all invariants held" if done.returncode == 0 else "FAILED (see output)"
    if done.returncode != 0:
        print(done.stdout[-4000:], done.stderr[-2000:], file=sys.stderr)
    return verdict, ran[0], ran[1], wall, f"{examples} x {steps}", seen.group(1) if seen else ""


def run(runs: int, quick: bool) -> str:
    budget = (8, 12) if quick else (30, 20)
    verdict, examples, steps, wall, asked, seen = soak(*budget)
    rows = [[asked, examples, steps, f"{wall:.0f}", verdict]]
    header = ["budget (sequences x steps)", "sequences run", "steps run", "wall s", "result"]
    return "\n".join(
        [
            stamp(),
            "",
            table(header, rows),
            "",
            f"What the sequences journaled (playbook:state, and people asked): {seen}.",
            "",
            "One run (a soak, not a timing): CI runs the same machine with 4 sequences of up to 10 "
            "steps. Every sequence starts with a fault found; its steps add faults (DBE, XID 48, a "
            "GPU off the bus), repeats after a repair, failing reset Jobs, hung reboots, failing "
            "or flaky diagnostics, late approvals, leader restarts and hand cordons. A failure "
            "prints Hypothesis' shrunk sequence of events. Found so far: a node "
            "a person cordoned and gpufleet then quarantined was never given back (the ownership "
            "gate refused the whole return); fixed, test_return_rule_sim.py keeps it fixed. And "
            "the simulator's reboot of a node running a Job's pod failed its PATCH (the pod had "
            "no uid), so every reboot timed out; fixed, test_k8s_sim_job_pods.py keeps it fixed.",
        ]
    )
