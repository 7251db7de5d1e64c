"""docs/performance.md upkeep: each benchmark replaces only its own section."""

from __future__ import annotations

from pathlib import Path

from bench.__main__ import discover
from bench.performance_doc import table, write_section


def test_sections_are_replaced_in_place_and_others_kept(tmp_path: Path) -> None:
    doc = tmp_path / "performance.md"
    write_section("a", "Bench A", "first A", doc)
    write_section("b", "Bench B", table(["x", "y"], [[1, 2]]), doc)
    write_section("a", "Bench A", "second A", doc)
    text = doc.read_text()
    assert text.startswith("# Performance")
    assert "cores" in text.split("<!-- bench:")[0]  # the machine line in the header
    assert text.count("## Bench A") == 1 and "second A" in text and "first A" not in text
    assert "| 1 | 2 |" in text
    assert text.index("## Bench A") < text.index("## Bench B")


def test_snapshot_benchmark_is_discovered() -> None:
    found, _ = discover()
    assert "snapshot_build" in found
    assert "_fleet_columns" not in found  # input generator, not a benchmark
