"""`gpufleet backtest --shards N` and the What-if page replay in time shards on worker processes:
the same OUT.json as a sequential backtest (but for one explained field), and a cancelled
What-if run leaves no worker behind.

One real Prometheus holds 40 minutes of the small CLI scenario (an XID 48, a hang, an exporter
outage); the detectors are those whose memory is at most 15 minutes, so that two shards pay off
on a 40-minute window (backtesting.backtest_sharded.shards_worth).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from backtesting.backtest_sharded import default_shards, shards_worth
from backtesting.sharded import warmup_seconds
from dashboards.whatif import SHIPPED, Eta, run
from detectors.registry import registry
from detectors.suite import DetectorSuite
from gpufleet.cli import main
from simulator.scenario import Scenario, scenario_from_dict
from tests.prometheus_fixture import PrometheusHandle, served_scenario
from tests.test_cli_detect_backtest_eval import TINY

pytestmark = [pytest.mark.prometheus]
KEEP = ("monitoring_gap", "gpu_xid", "gpu_memory", "gpu_throttle", "nccl_hang", "anomaly")


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return scenario_from_dict({**TINY, "duration": "40m"}, "tiny-40")


@pytest.fixture(scope="module")
def prom(
    scenario: Scenario, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusHandle]:
    yield from served_scenario(scenario, tmp_path_factory.mktemp("sharded-backtest"))


def test_short_windows_are_not_sharded_when_the_warm_up_would_cost_more() -> None:
    assert shards_worth(2, 86_400.0, 16_200.0) == 2
    assert shards_worth(8, 86_400.0, 16_200.0) == 8  # 10,800 s + 16,200 s of warm-up each
    assert shards_worth(3, 20_000.0, 16_200.0) == 1  # 6,667 s + 16,200 s > 20,000 s
    assert shards_worth(2, 3_600.0, 16_200.0) == 1  # an hour with gpu_idle's 4.5 h memory
    assert shards_worth(2, 2_370.0, 900.0) == 2 and shards_worth(2, 1_770.0, 900.0) == 1


def test_backtest_in_two_shards_writes_the_sequential_contract(
    prom: PrometheusHandle, scenario: Scenario, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    config = tmp_path / "gpufleet.yaml"
    off = {name: {"enabled": False} for name in registry() if name not in KEEP}
    config.write_text(yaml.safe_dump({"detectors": off}))
    docs = {}
    for shards in (1, 2):
        out = tmp_path / f"out-{shards}.json"
        argv = ["backtest", "--prometheus-url", prom.url, "--start", str(scenario.start + 30),
                "--end", str(scenario.end), "--step", "30s", "--config", str(config),
                "--shards", str(shards), "--output", str(out)]  # fmt: skip
        assert main(argv) == 0
        assert f"{shards} shard(s)" in capsys.readouterr().err
        docs[shards] = json.loads(out.read_text())
    one, two = docs[1], docs[2]
    assert two["actions"] == one["actions"]  # every dry-run decision, reasons and time included
    assert any(a["playbook"] == "restart_job" for a in two["actions"])
    assert len(two["findings"]) == len(one["findings"]) >= 3
    for a, b in zip(two["findings"], one["findings"], strict=True):
        if a == b:
            continue
        # Explained (tests/test_sharded_replay.py): to the second shard, whose warm-up begins
        # after the XID, its held gauge is "present before gpufleet started".
        assert a["kind"] == "gpu_xid"
        assert {k for k in a if a[k] != b[k]} <= {"evidence", "summary"}
        assert a["first_seen"] == b["first_seen"] and a["last_seen"] == b["last_seen"]


def test_shards_below_one_is_a_usage_error(
    prom: PrometheusHandle, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["backtest", "--prometheus-url", prom.url, "--start", "1767225630", "--end",
            "1767226200", "--shards", "0", "--output", str(tmp_path / "o.json")]  # fmt: skip
    with pytest.raises(SystemExit) as ex:
        main(argv)
    assert ex.value.code == 2 and "--shards" in capsys.readouterr().err


class Cancelled(Exception):
    """What Streamlit's stop does to the page's script: an exception from a page call."""


def test_cancelling_the_whatif_run_stops_its_worker_processes(
    prom: PrometheusHandle, scenario: Scenario
) -> None:
    suite = DetectorSuite.default(KEEP)
    assert warmup_seconds(suite) == 900.0
    workers: list[int] = []
    cancelled_at: list[float] = []

    def stop_once_workers_run(eta: Eta) -> None:
        alive = [p.pid for p in multiprocessing.active_children() if p.pid is not None]
        if alive:
            workers.extend(alive)
            cancelled_at.append(time.monotonic())
            raise Cancelled

    with pytest.raises(Cancelled):
        run(prom.url, scenario.start + 30, scenario.end, 30.0, SHIPPED / "default.yaml",
            "alpha", stop_once_workers_run, shards=2, suite=suite)  # fmt: skip
    assert len(workers) == 2  # the run was sharded, on two processes
    assert time.monotonic() - cancelled_at[0] < 10.0  # not after the replay would have ended
    assert multiprocessing.active_children() == []
    for pid in workers:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # gone, and reaped: not even a zombie


def test_unreachable_prometheus_in_a_sharded_backtest_is_the_same_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two days: long enough for two shards with the full suite; each worker's error reaches
    the command as the sequential one does (exit 3, no OUT.json, no traceback)."""
    out = tmp_path / "out.json"
    url = "http://127.0.0.1:9"
    argv = ["backtest", "--prometheus-url", url, "--start", "1767225600", "--end", "1767398400",
            "--timeout", "1", "--shards", "2", "--output", str(out)]  # fmt: skip
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "2 shard(s)" in err and f"Prometheus at {url} is unreachable" in err
    assert "Traceback" not in err and not out.exists()
    assert multiprocessing.active_children() == []


def test_the_default_is_one_shard_per_two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each shard keeps about 1.5 cores busy (its detectors, its parsers, Prometheus): on two
    cores two shards were slower than one (docs/performance.md, backtest replay)."""
    for cpus, shards in ((1, 1), (2, 1), (3, 1), (4, 2), (8, 4)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda _pid, n=cpus: set(range(n)))
        assert default_shards() == shards
