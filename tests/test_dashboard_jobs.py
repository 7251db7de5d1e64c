"""Jobs page: the ranks x metrics heatmap shows a slow rank against its job's median, so a
healthy job's ranks (all near 100 %) are pale instead of one uniformly dark column."""

from __future__ import annotations

import pandas as pd  # type: ignore[import-untyped]

from dashboards.views.jobs import SPAN_MIN, UTIL_VS_MEDIAN, heatmap


def ranks(util: list[float]) -> pd.DataFrame:
    n = len(util)
    return pd.DataFrame({"rank": [f"worker-{i} · gpu 0" for i in range(n)], "utilization": util,
                         "health": ["healthy"] * n, "flag": [""] * n})  # fmt: skip


def colour(util: list[float]) -> tuple[dict[str, float], list[float]]:
    """Each rank's coloured value, and the colour scale's domain."""
    spec = heatmap(ranks(util)).to_dict()
    cells = next(layer for layer in spec["layer"] if layer["encoding"]["color"]["field"] == "delta")
    domain = cells["encoding"]["color"]["scale"]["domain"]
    rows = spec["datasets"][cells["data"]["name"]]
    assert {r["metric"] for r in rows} == {UTIL_VS_MEDIAN}
    return {r["rank"]: r["delta"] for r in rows}, domain


def test_a_healthy_jobs_ranks_sit_at_the_pale_middle_of_the_scale() -> None:
    # The old heatmap coloured 97-100 % on a 0-100 scale: every cell the darkest blue.
    by, domain = colour([100.0, 98.0, 100.0, 99.0])
    assert domain == [-SPAN_MIN, SPAN_MIN]
    assert all(abs(v) <= 1.5 for v in by.values())


def test_a_slow_rank_is_the_one_cell_at_the_end_of_the_scale() -> None:
    by, domain = colour([100.0, 99.0, 62.0, 100.0])
    assert domain == [-37.5, 37.5]
    assert min(by, key=lambda r: by[r]) == "worker-2 · gpu 0" and by["worker-2 · gpu 0"] == -37.5
