"""Scenario files: the demo loads, and bad files name the file, field path and expectation."""

from __future__ import annotations

from pathlib import Path

import pytest

from errors import ConfigError
from gpufleet.cli import main
from simulator.layout import build_layout
from simulator.scenario import demo_scenario, load_scenario, parse_duration


def test_demo_scenario_places_every_workload() -> None:
    sc = demo_scenario()
    layout = build_layout(sc)
    assert sc.gpu_count == 96
    assert layout.unplaced == []
    assert len(set(layout.gpu_uuid)) == 96
    ranks = [p.rank for p in layout.pods if p.workload == "ml/llama-pretrain"]
    assert ranks == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90.0), ("30s", 30.0), ("1.5m", 90.0), ("2h", 7200.0)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_bad_field_names_file_path_and_expectation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: x\npools:\n  - {name: p, model: H100, nodes: 1}\n"
        "faults:\n  - {kind: xid48_dbe, node: p-0000, gpu: 1, start: soon}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_scenario(bad)
    message = str(info.value)
    assert str(bad) in message
    assert "faults[0].start" in message
    assert "duration like '30s'" in message


def test_unknown_model_lists_choices(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\npools:\n  - {name: p, model: V100, nodes: 1}\n")
    with pytest.raises(ConfigError) as info:
        load_scenario(bad)
    assert "pools[0].model" in str(info.value)
    assert "'A100', 'H100' or 'H200'" in str(info.value)


def test_gpu_diagnostics_keys_name_node_and_index(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: x\npools:\n  - {name: p, model: H100, nodes: 1}\ngpu_diagnostics: {p-0000: fail}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_scenario(bad)
    assert str(bad) in str(info.value) and "gpu_diagnostics" in str(info.value)
    assert "<node>/<gpu index> (got 'p-0000')" in str(info.value)


def test_cli_version_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    assert "gpufleet" in capsys.readouterr().out
