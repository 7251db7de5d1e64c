"""A sharded replay whose parent is killed (kill -9 of `gpufleet backtest`, an OOM-killed
dashboard) leaves no worker replaying its shard for nobody: each worker notices that the process
that started it is gone and exits within a second, instead of holding a core for the rest of
its shard (minutes on a day of history). The kill comes about a second after the workers
start, often while they still import their modules: a worker orphaned before its initializer
ran must leave too."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.orphans import HAS_PROC, children, kill_9_and_check_children_gone, kill_survivors

REPLAY = """
from backtesting.sharded import replay_sharded
from detectors.suite import DetectorSuite
from lab.simulated import SimulatedFrames
from simulator.scenario import scenario_from_dict
from tests.test_cli_detect_backtest_eval import TINY

sc = scenario_from_dict({**TINY, "duration": "7d"}, "tiny-week")
replay_sharded(SimulatedFrames(sc), DetectorSuite.default(["gpu_xid"]), sc.start + 30, sc.end,
               30.0, shards=2, workers=2, warmup=0.0)
"""


def _workers(parent: int, deadline: float) -> dict[int, str]:
    """The pool's two workers (spawned interpreters, not the resource tracker), once both run."""
    while time.monotonic() < deadline:
        kids = {p: c for p, c in children(parent).items() if "spawn_main" in c}
        if len(kids) == 2:
            return kids
        time.sleep(0.05)
    raise AssertionError("the sharded replay did not start two workers")


@pytest.mark.skipif(not HAS_PROC, reason="reads children from /proc")
def test_workers_of_a_killed_replay_exit_instead_of_finishing_their_shards() -> None:
    root = Path(__file__).resolve().parents[1]
    parent = subprocess.Popen([sys.executable, "-c", REPLAY], cwd=root, text=True)
    workers: dict[int, str] = {}
    try:
        workers = _workers(parent.pid, time.monotonic() + 60)
        time.sleep(1.0)  # a week of steps each: they would replay for minutes
        kill_9_and_check_children_gone(parent, workers, ports=())
    finally:
        parent.kill()
        kill_survivors(workers)
