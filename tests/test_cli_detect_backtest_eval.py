"""`gpufleet detect`, `backtest` and `eval` end to end against a real, backfilled Prometheus.

One small scenario (24 GPUs, 20 minutes at 30 s): an XID 48 at 5 min, a hung job at 10-15 min
and an exporter outage as the confounder. The commands run in-process through `gpufleet.cli`
(one subprocess run checks that an unreachable Prometheus ends without a stack trace; another
kills an eval with SIGKILL mid-replay and finds its Prometheus gone with it).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.cli import main
from simulator.engine import FleetSimulator
from simulator.scenario import Scenario, scenario_from_dict
from simulator.truth import ground_truth
from tests.orphans import HAS_PROC, children, kill_9_and_check_children_gone, kill_survivors
from tests.prometheus_fixture import PrometheusHandle, served_scenario
from tests.service.demo_proc import reader, wait_for

pytestmark = [pytest.mark.prometheus]
TINY: dict[str, Any] = {
    "name": "tiny",
    "seed": 3,
    "duration": "20m",
    "scrape_interval": "30s",
    "pools": [
        {"name": "h100", "model": "H100", "nodes": 2},
        {"name": "a100", "model": "A100", "nodes": 1},
    ],
    "workloads": [
        {"name": "train", "kind": "training", "pool": "h100", "replicas": 2, "steps_metric": True},
        {
            "name": "serve",
            "kind": "inference",
            "namespace": "serving",
            "pool": "a100",
            "replicas": 1,
            "gpus_per_pod": 2,
        },
    ],
    "faults": [
        {"kind": "xid48_dbe", "node": "h100-0001", "gpu": 1, "start": "5m"},
        {"kind": "nccl_hang", "job": "default/train", "start": "10m", "end": "15m"},
    ],
    "confounders": [{"kind": "exporter_down", "node": "a100-0000", "start": "3m", "end": "6m"}],
}
FINDING_KEYS = {"kind", "severity", "node", "gpu_uuid", "job", "first_seen", "last_seen",
                "summary", "evidence"}  # fmt: skip
ACTION_KEYS = {"playbook", "target", "decided_at", "decision", "reasons"}
UNREACHABLE = "http://127.0.0.1:9"


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return scenario_from_dict(TINY, "tiny")


@pytest.fixture(scope="module")
def prom(
    scenario: Scenario, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusHandle]:
    yield from served_scenario(scenario, tmp_path_factory.mktemp("cli-dbe"))


def _xid_gpu(sc: Scenario) -> str:
    truth = ground_truth(sc, FleetSimulator(sc).layout)
    return str(next(f["gpu_uuid"] for f in truth["faults"] if f["kind"] == "xid48_dbe"))


def test_detect_finds_the_injected_faults(
    prom: PrometheusHandle, scenario: Scenario, capsys: pytest.CaptureFixture[str]
) -> None:
    at = str(scenario.start + 12 * 60)
    assert main(["detect", "--prometheus-url", prom.url, "--at", at, "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["at"] == float(at)
    kinds = {(f["kind"], f["gpu_uuid"] or f["job"]) for f in doc["findings"]}
    assert ("gpu_xid", _xid_gpu(scenario)) in kinds
    assert ("nccl_hang", "default/train") in kinds
    assert all(set(f) >= FINDING_KEYS for f in doc["findings"])
    # one collection, no warm-up: the XID is there at once (within the XID count's 5-minute
    # window: after it, a 4.x exporter shows only the sticky gauge's follower 45); the table
    # lists it
    soon = str(scenario.start + 8 * 60)
    argv = ["detect", "--prometheus-url", prom.url, "--at", soon, "--warmup", "0"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "gpu_xid" in out and "critical" in out and "findings at" in out
    # before the faults: nothing at or above critical -> 0
    early = str(scenario.start + 2 * 60)
    assert main(["detect", "--prometheus-url", prom.url, "--at", early]) == 0


def _entities_disjoint(findings: list[dict[str, Any]]) -> bool:
    spans: dict[tuple[Any, ...], list[tuple[float, float]]] = {}
    for f in findings:
        key = (f["kind"], f["node"], f["gpu_uuid"], f["job"])
        spans.setdefault(key, []).append((f["first_seen"], f["last_seen"]))
    for s in spans.values():
        s.sort()
        if any(a[1] >= b[0] for a, b in itertools.pairwise(s)):
            return False
    return True


def test_backtest_writes_the_contract_without_config(
    prom: PrometheusHandle, scenario: Scenario, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    out = tmp_path / "out.json"
    argv = ["backtest", "--prometheus-url", prom.url, "--start", str(scenario.start + 30),
            "--end", "2026-01-01T00:20:00Z", "--step", "30s", "--output", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert "wrote" in capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert set(doc) == {"findings", "actions"}
    findings, actions = doc["findings"], doc["actions"]
    for f in findings:
        assert set(f) >= FINDING_KEYS
        assert f["severity"] in ("critical", "warning", "info")
        assert isinstance(f["first_seen"], float) and isinstance(f["last_seen"], float)
        assert f["first_seen"] <= f["last_seen"] and isinstance(f["evidence"], dict)
        assert all(f[k] is None or isinstance(f[k], str) for k in ("node", "gpu_uuid", "job"))
    assert _entities_disjoint(findings)  # one finding per continuous episode
    hangs = [f for f in findings if f["kind"] == "nccl_hang"]
    assert [h["job"] for h in hangs] == ["default/train"]
    assert any(f["kind"] == "gpu_xid" and f["gpu_uuid"] == _xid_gpu(scenario) for f in findings)
    assert actions
    for a in actions:
        assert set(a) == ACTION_KEYS
        assert a["decision"] in ("execute", "await_approval", "deny")
        assert a["reasons"] and all(isinstance(r, str) for r in a["reasons"])
        assert isinstance(a["decided_at"], float)
    assert any(a["playbook"] == "restart_job" and a["target"] == "job/default/train"
               for a in actions)  # fmt: skip


def test_bad_config_and_policy_exit_2(
    prom: PrometheusHandle, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "gpufleet.yaml"
    cfg.write_text("detectors:\n  straggler: {min_gap: high}\n")
    out = tmp_path / "out.json"
    base = ["backtest", "--prometheus-url", prom.url, "--start", "1767225630",
            "--end", "1767225900", "--output", str(out)]  # fmt: skip
    assert main([*base, "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert str(cfg) in err and "detectors.straggler.min_gap" in err and "number" in err
    policy = tmp_path / "policy.yaml"
    rule = {"name": "x", "match": {"kinds": ["gpu_xid"]}, "playbook": "cordon", "mode": "often"}
    policy.write_text(yaml.safe_dump({"rules": [rule]}))
    assert main([*base, "--policy", str(policy)]) == 2
    err = capsys.readouterr().err
    assert str(policy) in err and "rules[0].mode" in err
    assert main(["detect", "--prometheus-url", prom.url, "--config", str(cfg)]) == 2
    assert not out.exists()
    with pytest.raises(SystemExit) as ex:
        main([*base[:-6], "--start", "1767225900", "--end", "1767225600", "-o", str(out)])
    assert ex.value.code == 2 and "is before --start" in capsys.readouterr().err
    with pytest.raises(SystemExit) as ex:
        main(["detect", "--prometheus-url", prom.url, "--at", "yesterday"])
    assert ex.value.code == 2 and "RFC 3339" in capsys.readouterr().err


def test_unreachable_prometheus_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.json"
    argv = ["backtest", "--prometheus-url", UNREACHABLE, "--start", "1767225600",
            "--end", "1767229200", "--timeout", "1", "--output", str(out)]  # fmt: skip
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert f"Prometheus at {UNREACHABLE} is unreachable" in err and "--prometheus-url" in err
    assert not out.exists()
    done = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli", "detect", "--prometheus-url", UNREACHABLE,
         "--timeout", "1"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert "unreachable" in done.stderr and "Traceback" not in done.stderr


def test_eval_one_scenario_suite(
    scenario: Scenario, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    out = tmp_path / "eval.json"
    assert main(["eval", "--suite", str(suite), "--output", str(out)]) == 0
    table = capsys.readouterr().out
    assert "detectors" in table and "static rules" in table
    assert "nccl_hang" in table and "xid48_dbe" in table and "exporter_down" in table
    assert "targets met" in table
    doc = json.loads(out.read_text())
    det, base = doc["overall"]["detectors"], doc["overall"]["static_rules"]
    assert det["recall"] == 1.0 and det["precision"] == 1.0 and det["f1"] == 1.0
    assert det["per_fault_kind"]["nccl_hang"]["median_ttd_s"] <= 120
    assert base["per_fault_kind"]["nccl_hang"]["recall"] == 0.0  # what static rules miss
    assert "exporter_down" in base["false_positives_by_confounder"]
    assert [s["name"] for s in doc["scenarios"]] == ["tiny"] and doc["targets"]["met"]


def test_eval_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                     monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    assert main(["eval", "--suite", str(tmp_path / "nope")]) == 2
    assert "not a directory" in capsys.readouterr().err
    (tmp_path / "bad.yaml").write_text("name: bad\nduration: soon\n")
    assert main(["eval", "--suite", str(tmp_path)]) == 2
    assert "bad.yaml" in capsys.readouterr().err
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(TINY))
    monkeypatch.setenv("PATH", str(tmp_path))  # no prometheus, no promtool
    assert main(["eval", "--suite", str(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert "install the Debian package prometheus" in err and "make test" in err


@pytest.mark.slow
@pytest.mark.skipif(not HAS_PROC, reason="needs Linux /proc")
def test_a_killed_eval_takes_its_prometheus_with_it(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "long.yaml").write_text(yaml.safe_dump({**TINY, "duration": "3h"}))  # 360 steps
    cmd = [sys.executable, "-m", "gpufleet.cli", "eval", "--suite", str(suite)]
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # its workdir outlives the kill: keep it here
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    seen: list[str] = []
    reader(proc.stderr, seen)
    kids: dict[int, str] = {}
    try:
        wait_for(seen, "replaying", proc, 120)  # its Prometheus is up and answering
        kids = children(proc.pid)
        prom = [c for c in kids.values() if "prometheus --config.file" in c]
        assert prom, kids
        port = int(prom[0].split("--web.listen-address=127.0.0.1:")[1].split()[0])

        kill_9_and_check_children_gone(proc, kids, [port])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_survivors(kids)
