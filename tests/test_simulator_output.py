"""Ground truth, the exporters' text, the OpenMetrics file and `gpufleet simulate` on the CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from gpufleet.cli import main
from observer.fleet.catalog import METRICS
from simulator.engine import FleetSimulator
from simulator.exposition import dcgm_text, kube_state_text, steps_text
from simulator.openmetrics import OpenMetricsWriter
from simulator.truth import ground_truth
from tests.simulator_cases import MIN, small


@pytest.fixture(scope="module")
def sim() -> FleetSimulator:
    return FleetSimulator(small())


def test_truth_lists_every_fault_and_confounder(sim: FleetSimulator) -> None:
    sc = sim.scenario
    truth = ground_truth(sc, sim.layout)
    faults = {f["kind"]: f for f in truth["faults"]}
    assert len(truth["faults"]) == len(sc.faults) == 9
    assert faults["xid79_fallen_off_bus"]["finding"] == "gpu_lost"
    assert faults["xid48_dbe"]["finding"] == "gpu_xid"
    assert faults["thermal_throttle"]["finding"] == "gpu_throttle"
    assert faults["nvlink_crc_storm"]["finding"] == "gpu_interconnect"
    assert faults["nccl_hang"]["job_nodes"] == ["a100-0000"]
    straggler = faults["straggler"]
    assert (straggler["node"], straggler["gpu"], straggler["job"]) == (
        "h100-0001",
        0,
        "default/train",
    )
    assert straggler["gpu_uuid"] == sim.layout.gpu_uuid[8]
    assert straggler["start"] == sc.start + 10 * MIN and straggler["end"] == sc.start + 20 * MIN
    assert faults["xid48_dbe"]["open_ended"] and faults["xid48_dbe"]["end"] == sc.end
    kinds = [(c["kind"], c["start"] - sc.start) for c in truth["confounders"]]
    assert ("checkpoint", 15 * MIN) in kinds and ("checkpoint", 30 * MIN) in kinds
    assert ("checkpoint", 25 * MIN) in kinds and ("eval_phase", 32 * MIN) in kinds
    assert ("exporter_down", 5 * MIN) in kinds and ("scrape_gap", 30 * MIN) in kinds
    assert ("job_start", 2 * MIN) in kinds and ("job_finish", 35 * MIN) in kinds
    assert len(kinds) == 8
    json.dumps(truth)


def test_dcgm_text_has_exporter_labels(sim: FleetSimulator) -> None:
    s = sim.sample(sim.scenario.start + 3 * MIN)
    text = dcgm_text(s, sim.layout, "a100-0001")
    for spec in METRICS:
        assert f"# TYPE {spec.name} {spec.exposed_kind.value}\n" in text  # as the exporter types it
    line = next(x for x in text.splitlines() if x.startswith('DCGM_FI_DEV_GPU_UTIL{gpu="0"'))
    for label in ("UUID", "pci_bus_id", "device", "modelName", "Hostname", "pod", "namespace"):
        assert f'{label}="' in line
    assert 'device="nvidia0"' in line and 'container="server"' in line
    free = next(x for x in text.splitlines() if x.startswith('DCGM_FI_DEV_GPU_UTIL{gpu="7"'))
    assert 'pod="' not in free
    down = dcgm_text(sim.sample(sim.scenario.start + 6 * MIN), sim.layout, "a100-0001")
    assert "DCGM_FI_DEV_GPU_UTIL{" not in down


def test_kube_state_text_follows_live_cordons(sim: FleetSimulator) -> None:
    s = sim.sample(sim.scenario.start + 3 * MIN)
    text = kube_state_text(s, sim.layout.nodes, unschedulable={"h100-0001"}, cluster="test")
    assert 'kube_node_spec_unschedulable{node="h100-0001"} 1' in text
    assert 'kube_node_spec_unschedulable{node="h100-0000"} 0' in text
    assert re.search(r'kube_pod_labels\{[^}]*label_training_kubeflow_org_job_name="train"', text)
    assert re.search(r'kube_pod_labels\{[^}]*label_jobset_sigs_k8s_io_jobset_name="hangjob"', text)
    assert re.search(r'kube_pod_info\{[^}]*pod="train-worker-1"[^}]*node="h100-0001"', text)
    assert 'kube_node_labels{node="a100-0000"' in text
    assert 'training_steps_total{namespace="default",pod="train-worker-0"} 180' in steps_text(s)


def test_openmetrics_groups_families_and_ends_with_eof(sim: FleetSimulator, tmp_path: Path) -> None:
    sc = sim.scenario
    out = tmp_path / "small.om"
    stats = OpenMetricsWriter(sim).write(out, sc.start + 29 * MIN, sc.start + 32 * MIN)
    assert stats.steps == 5  # 29:00 .. 32:00 every 30 s, minus the two in the 30m-31m gap
    lines = out.read_text().splitlines()
    assert lines[-1] == "# EOF"
    seen: list[str] = []
    for line in lines[:-1]:
        if line.startswith("# TYPE "):
            seen.append(line.split()[2])
            continue
        if line.startswith("#"):
            continue
        name = line.split("{", 1)[0]
        family = seen[-1]
        assert name == family or name == family + "_total", (name, family)
    assert len(seen) == len(set(seen))
    assert "# TYPE training_steps counter" in lines
    stamps = {float(x.rsplit(" ", 1)[1]) for x in lines if x.startswith("up{")}
    gap = {sc.start + 30 * MIN, sc.start + 30.5 * MIN}
    assert not stamps & gap and len(stamps) == 5
    assert np.isclose(min(stamps), sc.start + 29 * MIN)


def test_cli_writes_openmetrics_and_truth(tmp_path: Path) -> None:
    om, truth = tmp_path / "demo.om", tmp_path / "truth.json"
    assert main(["simulate", "--openmetrics", str(om), "--truth", str(truth), "--end", "2m"]) == 0
    assert om.read_text().endswith("# EOF\n")
    assert json.loads(truth.read_text())["scenario"] == "demo"


def test_cli_bad_scenario_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: x\npools:\n  - {name: p, model: H100, nodes: 1}\n"
        "faults:\n  - {kind: thermal_throttle, node: p-0007, gpu: 1, start: 1m}\n"
    )
    assert main(["simulate", "--scenario", str(bad), "--truth", str(tmp_path / "t.json")]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "faults[0].node" in err and "expected a node" in err
    bad.write_text("name: x\npools:\n  - {name: p, model: H100, nodes: 1, gpus_per_node: 99}\n")
    assert main(["simulate", "--scenario", str(bad), "--truth", str(tmp_path / "t.json")]) == 2
    assert "pools[0].gpus_per_node" in capsys.readouterr().err
