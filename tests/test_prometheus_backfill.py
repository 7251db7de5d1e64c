"""Real Prometheus over backfilled simulator output answers PromQL with dcgm-exporter's labels."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from observer.fleet.catalog import METRICS
from simulator.engine import FleetSimulator
from simulator.openmetrics import OpenMetricsWriter
from simulator.scenario import Scenario
from tests.prometheus_fixture import PrometheusFactory, PrometheusHandle, start_prometheus
from tests.simulator_cases import MIN, small

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]
DCGM_LABELS = ("gpu", "UUID", "modelName", "Hostname", "pci_bus_id", "device")
ALLOCATED_GPUS = 16 + 8 + 6  # train, hangjob, serve + notebook (at 10 minutes)


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return small()


@pytest.fixture(scope="module")
def prom(
    scenario: Scenario, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusHandle]:
    tmp = tmp_path_factory.mktemp("prom")
    om = tmp / "small.om"
    OpenMetricsWriter(FleetSimulator(scenario)).write(om, scenario.start, scenario.start + 16 * MIN)
    handle = start_prometheus(om, tmp, lookback_delta="45s")
    yield handle
    handle.stop()


def at(sc: Scenario, minutes: float) -> float:
    return sc.start + minutes * MIN


@pytest.mark.parametrize("name", [m.name for m in METRICS])
def test_every_catalog_metric_with_labels(
    prom: PrometheusHandle, scenario: Scenario, name: str
) -> None:
    t = at(scenario, 10)
    result = prom.query(name, t)
    assert len(result) == 40 - 1 - 0  # the XID-79 GPU is gone at 10 minutes
    for r in result:
        assert all(r["metric"].get(k) for k in DCGM_LABELS), r["metric"]
        assert r["metric"]["job"] == "dcgm-exporter"
    allocated = prom.query(f'{name}{{pod!=""}}', t)
    assert len(allocated) == ALLOCATED_GPUS
    assert all(r["metric"]["namespace"] and r["metric"]["container"] for r in allocated)


def test_fault_and_gap_visible_through_promql(prom: PrometheusHandle, scenario: Scenario) -> None:
    storm = prom.query(
        "rate(DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL[2m]) > 100", at(scenario, 10)
    )
    assert [(r["metric"]["Hostname"], r["metric"]["gpu"]) for r in storm] == [("h100-0002", "5")]
    # 4.x (the default): the sticky gauge shows XID 48's follower 45, with `err_code`; at 11 min
    # the 48 series written before the follower is past the lookback (no staleness markers)
    xid = prom.query("DCGM_FI_DEV_XID_ERRORS > 0", at(scenario, 11))
    assert sorted((r["value"][1], r["metric"]["err_code"]) for r in xid) == [
        ("45", "45"),
        ("64", "64"),
    ]
    down = prom.query(
        'count by (Hostname) (DCGM_FI_DEV_GPU_UTIL{Hostname="a100-0001"})', at(scenario, 7)
    )
    assert down == []
    up = prom.query('up{job="dcgm-exporter",instance="a100-0001:9400"}', at(scenario, 7))
    assert up[0]["value"][1] == "0"
    count = prom.query("count by (xid) (DCGM_EXP_XID_ERRORS_COUNT > 0)", at(scenario, 6))
    assert sorted(r["metric"]["xid"] for r in count) == ["45", "48", "64"]


def test_kube_state_metrics_and_steps(prom: PrometheusHandle, scenario: Scenario) -> None:
    t = at(scenario, 10)
    labels = prom.query('kube_pod_labels{label_training_kubeflow_org_job_name="train"}', t)
    assert sorted(r["metric"]["pod"] for r in labels) == ["train-worker-0", "train-worker-1"]
    info = prom.query('kube_pod_info{pod="hangjob-worker-0"}', t)
    assert info[0]["metric"]["node"] == "a100-0000" and info[0]["metric"]["uid"]
    assert len(prom.query("kube_node_info", t)) == 5
    assert len(prom.query("kube_node_spec_unschedulable == 0", t)) == 5
    assert prom.query('kube_node_labels{label_gpufleet_io_pool="a100"}', t)
    steps = prom.query("rate(training_steps_total[2m])", at(scenario, 8))
    by_pod = {r["metric"]["pod"]: float(r["value"][1]) for r in steps}
    assert by_pod["train-worker-0"] == pytest.approx(1.0, rel=0.05)
    assert set(by_pod) == {"train-worker-0", "train-worker-1", "hangjob-worker-0"}


def test_factory_backfills_a_scenario(prometheus_factory: PrometheusFactory) -> None:
    sc = small().model_copy(update={"duration": 180.0, "faults": [], "confounders": []})
    prom = prometheus_factory(sc)
    assert prom.query("count(DCGM_FI_DEV_GPU_UTIL)", sc.start + 60)[0]["value"][1] == "40"
    # Backfill writes no staleness markers: when the hangjob starts at 2m its GPUs get new
    # series (pod labels) and the label-less ones linger for the 5m lookback. Collectors that
    # need exact "now" series use a lookback near the scrape interval (see the module fixture).
    assert prom.query("count(DCGM_FI_DEV_GPU_UTIL)", sc.start + 150)[0]["value"][1] == "48"
    short = prometheus_factory(sc, lookback_delta="45s")
    assert short.query("count(DCGM_FI_DEV_GPU_UTIL)", sc.start + 150)[0]["value"][1] == "40"
