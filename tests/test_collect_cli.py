"""`gpufleet collect` end to end: real Prometheus, the simulator's live endpoints and API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.cli import main
from simulator.serve import SimulationHandle, start_simulation
from tests.prometheus_fixture import PrometheusHandle, start_prometheus, write_scenario
from tests.simulator_cases import MIN, small


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusHandle]:
    sc = small()
    tmp = tmp_path_factory.mktemp("cli-prom")
    handle = start_prometheus(write_scenario(sc, tmp / "s.om", sc.start, sc.start + 11 * MIN), tmp)
    yield handle
    handle.stop()


@pytest.fixture
def live(tmp_path: Path) -> Iterator[SimulationHandle]:
    handle = start_simulation(small(), kubeconfig_out=tmp_path / "kubeconfig")
    yield handle
    handle.stop()


@pytest.mark.prometheus
def test_summary_and_json_from_prometheus(
    prom: PrometheusHandle, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    at = "2026-01-01T00:07:00Z"  # a100-0001's exporter is down (5-8 min)
    assert main(["collect", "--prometheus-url", prom.url, "--at", at, "--summary"]) == 0
    out = capsys.readouterr().out
    assert "40 GPUs on 5 nodes, 6 pods, 2 jobs" in out
    assert "stale: a100-0001 (2.5m old, exporter down)" in out
    assert "default/train" in out and "23 queries" in out
    assert "ALLOCATABLE" in out and "5/8" in out  # h100-0002: the device plugin withdrew 3
    assert "fields: " in out and " on full evidence" in out  # the coverage report
    dump = tmp_path / "snap.json"
    assert main(["collect", "--prometheus-url", prom.url, "--at", at, "-o", str(dump)]) == 0
    doc = json.loads(dump.read_text())
    assert len(doc["gpus"]["uuid"]) == 40 and doc["telemetry"]["scrape_interval"] == 30.0
    alloc = {n["name"]: (n["gpu_allocatable"], n["gpu_capacity"]) for n in doc["nodes"]}
    assert alloc["h100-0002"] == (5, 8) and alloc["h100-0000"] == (8, 8)
    stamps = doc["metrics"]["DCGM_FI_DEV_GPU_UTIL"]["timestamp"]
    old = [t for t in stamps if t is not None and t < doc["taken_at"] - 60]
    assert len(old) == 9  # 8 behind the down exporter + the XID 79 GPU, within the lookback


def test_errors_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["collect", "--prometheus-url", "http://127.0.0.1:9", "--timeout", "1"])
    err = capsys.readouterr().err
    assert code == 1
    assert "Prometheus at http://127.0.0.1:9 is unreachable" in err and "--prometheus-url" in err
    with pytest.raises(SystemExit) as exit_:
        main(["collect", "--scrape", "http://127.0.0.1:9/metrics", "--at", "0"])
    assert exit_.value.code == 2
    assert main(["collect", "--scrape", "http://127.0.0.1:9/metrics", "--timeout", "0.5"]) == 1
    assert "no scrape target answered" in capsys.readouterr().err


def test_direct_scrape_with_kubernetes(
    live: SimulationHandle, capsys: pytest.CaptureFixture[str]
) -> None:
    assert live.kubeconfig is not None
    argv = ["collect", "--targets", f"{live.metrics_url}/targets",
            "--kubeconfig", str(live.kubeconfig)]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "40 GPUs on 5 nodes" in out
    assert out.count(" ready") == 5  # node conditions came from the Kubernetes API
