"""A cluster whose training job is named by a label of its own (`service.source.job_label_keys`
in the config): `gpufleet detect`, `backtest`, `collect` and the dashboard's What-if group its
pods into the job the running service sees (`default/run-7`), not the one the built-in keys find
(`default/train`). Against a real, backfilled Prometheus and the simulator's exporters."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards.whatif import SHIPPED, run
from gpufleet.cli import main
from gpufleet.commands.dashboard import settings_of
from gpufleet.config import load_config
from remediations.store import Store
from simulator.scenario import Scenario, scenario_from_dict
from simulator.serve import SimulationHandle, start_simulation
from tests.prometheus_fixture import PrometheusHandle, served_scenario
from tests.test_dashboard_pages import app

pytestmark = [pytest.mark.prometheus]
CUSTOM = "team.example.com/run"
LABELLED: dict[str, Any] = {
    "name": "labelled",
    "seed": 5,
    "duration": "20m",
    "scrape_interval": "30s",
    "pools": [{"name": "h100", "model": "H100", "nodes": 2}],
    "workloads": [
        {
            "name": "train",
            "kind": "training",
            "pool": "h100",
            "replicas": 2,
            "steps_metric": True,
            "labels": {CUSTOM: "run-7"},
        },
    ],
    "faults": [{"kind": "nccl_hang", "job": "default/train", "start": "5m", "end": "15m"}],
}


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return scenario_from_dict(LABELLED, "labelled")


@pytest.fixture(scope="module")
def prom(
    scenario: Scenario, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusHandle]:
    yield from served_scenario(scenario, tmp_path_factory.mktemp("cli-keys"))


@pytest.fixture
def config(tmp_path: Path) -> Path:
    cfg = tmp_path / "gpufleet.yaml"
    cfg.write_text(yaml.safe_dump({"service": {"source": {"job_label_keys": [CUSTOM]}}}))
    return cfg


def test_detect_names_the_job_by_the_configured_label(
    prom: PrometheusHandle, scenario: Scenario, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    at = str(scenario.start + 12 * 60)
    argv = ["detect", "--prometheus-url", prom.url, "--at", at, "--format", "json"]
    main([*argv, "--config", str(config)])
    jobs = {f["job"] for f in json.loads(capsys.readouterr().out)["findings"] if f["job"]}
    assert jobs == {"default/run-7"}
    main(argv)  # without the config: the built-in keys, as before
    jobs = {f["job"] for f in json.loads(capsys.readouterr().out)["findings"] if f["job"]}
    assert jobs == {"default/train"}


def test_backtest_names_the_job_by_the_configured_label(
    prom: PrometheusHandle, scenario: Scenario, config: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out.json"
    argv = ["backtest", "--prometheus-url", prom.url, "--start", str(scenario.start + 30),
            "--end", str(scenario.end), "--step", "30s", "--output", str(out),
            "--config", str(config)]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    assert {f["job"] for f in doc["findings"] if f["kind"] == "nccl_hang"} == {"default/run-7"}
    targets = {a["target"] for a in doc["actions"] if a["target"].startswith("job/")}
    assert targets == {"job/default/run-7"}


def test_whatif_names_the_job_by_the_configured_label(
    prom: PrometheusHandle, scenario: Scenario, config: Path
) -> None:
    """The keys `gpufleet dashboard` resolves from the config, as the page hands them to run."""
    keys = settings_of(load_config(config)[0], None).job_label_keys
    assert keys == (CUSTOM,)
    window = (scenario.start + 30, scenario.end, 30.0, SHIPPED / "default.yaml", "default")
    result = run(prom.url, *window, shards=1, job_label_keys=keys)
    assert {f.job for f in result.episodes if f.kind == "nccl_hang"} == {"default/run-7"}
    assert {a.target for a in result.actions if a.playbook == "restart_job"} == {
        "job/default/run-7"
    }
    result = run(prom.url, *window, shards=1)  # the built-in keys, as before
    assert {f.job for f in result.episodes if f.kind == "nccl_hang"} == {"default/train"}


def test_whatif_page_names_the_job_by_the_configured_label(
    prom: PrometheusHandle, scenario: Scenario, tmp_path: Path
) -> None:
    """The page, from the settings file `gpufleet dashboard` writes, to the replayed findings."""
    store = f"sqlite:///{tmp_path / 'journal.db'}"
    Store.open(store, cluster="default").close()
    cfg = tmp_path / "gpufleet.yaml"
    cfg.write_text(yaml.safe_dump({
        "store_url": store, "dashboard": {"prometheus_url": prom.url},
        "service": {"source": {"job_label_keys": [CUSTOM]}},
    }))  # fmt: skip
    written = settings_of(load_config(cfg)[0], None).write(tmp_path / "settings.json")
    at = app(written, "page_files/whatif.py")
    for key, t in (("wi_start", scenario.start + 30), ("wi_end", scenario.end)):
        at.datetime_input(key=key).set_value(datetime.fromtimestamp(t, UTC).replace(tzinfo=None))
    at.selectbox(key="wi_policy").set_value("shipped: default")
    at.button(key="wi_run").click().run(timeout=120)
    assert not at.exception and not at.error, [e.value for e in at.error]
    found = at.dataframe[0].value
    assert set(found[found["kind"] == "nccl_hang"]["job"]) == {"default/run-7"}
    acts = at.dataframe[1].value
    assert set(acts[acts["playbook"] == "restart_job"]["target"]) == {"job/default/run-7"}


def _jobs_of(snapshot: Path) -> set[str]:
    doc = json.loads(snapshot.read_text())
    return {job["key"] for job in doc["jobs"]}


def test_collect_from_prometheus_names_the_job_by_the_configured_label(
    prom: PrometheusHandle, scenario: Scenario, config: Path, tmp_path: Path
) -> None:
    out = tmp_path / "snap.json"
    at = str(scenario.start + 12 * 60)
    argv = ["collect", "--prometheus-url", prom.url, "--at", at, "--output", str(out)]
    assert main([*argv, "--config", str(config)]) == 0
    assert _jobs_of(out) == {"default/run-7"}
    assert main(argv) == 0  # without the config: the built-in keys, as before
    assert _jobs_of(out) == {"default/train"}


@pytest.fixture
def served(scenario: Scenario, tmp_path: Path) -> Iterator[SimulationHandle]:
    handle = start_simulation(scenario, kubeconfig_out=tmp_path / "kubeconfig")
    try:
        yield handle
    finally:
        handle.stop()


def test_collect_by_direct_scrape_names_the_job_by_the_configured_label(
    served: SimulationHandle, config: Path, tmp_path: Path
) -> None:
    out = tmp_path / "snap.json"
    argv = ["collect", "--targets", f"{served.metrics_url}/targets", "--output", str(out),
            "--kubeconfig", str(served.kubeconfig), "--config", str(config)]  # fmt: skip
    assert main(argv) in (0, 4)  # one round: no counter increases yet (degraded)
    assert _jobs_of(out) == {"default/run-7"}
