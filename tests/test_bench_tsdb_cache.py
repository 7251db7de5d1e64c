"""The benchmark TSDB cache: built once per key, reused after, rebuilt when a source changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench._tsdb_cache import cache_key, cached_tsdb


def _sources(root: Path) -> list[str]:
    (root / "sim").mkdir()
    (root / "sim" / "engine.py").write_text("SEED = 1\n")
    (root / "scenario.py").write_text("GPUS = 8\n")
    return ["sim", "scenario.py"]


class Builder:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, data: Path) -> dict[str, Any]:
        self.calls += 1
        data.mkdir(parents=True)
        (data / "block").write_text(f"build {self.calls}")
        return {"samples": 42}


def test_second_run_reuses_the_kept_tsdb_in_a_fresh_copy(tmp_path: Path) -> None:
    sources = _sources(tmp_path)
    build = Builder()
    params = {"gpus": 8, "hours": 2}
    runs = []
    for i in range(2):
        into = tmp_path / f"run{i}"
        into.mkdir()
        data, meta = cached_tsdb(params, build, into, tmp_path / "cache", sources, tmp_path)
        runs.append((data, meta))
        (data / "wal").write_text("a running Prometheus writes here")
    assert build.calls == 1
    assert [m["reused"] for _, m in runs] == [False, True]
    assert runs[1][1]["samples"] == 42 and runs[1][1]["build_seconds"] >= 0
    assert runs[0][0] != runs[1][0]
    assert (runs[1][0] / "block").read_text() == "build 1"
    kept = next((tmp_path / "cache").iterdir()) / "data"
    assert sorted(p.name for p in kept.iterdir()) == ["block"]


def test_a_changed_simulator_or_parameter_makes_a_new_key(tmp_path: Path) -> None:
    sources = _sources(tmp_path)
    key = cache_key({"gpus": 8}, sources, tmp_path)
    assert cache_key({"gpus": 8}, sources, tmp_path) == key
    assert cache_key({"gpus": 16}, sources, tmp_path) != key
    (tmp_path / "sim" / "engine.py").write_text("SEED = 2\n")
    assert cache_key({"gpus": 8}, sources, tmp_path) != key
