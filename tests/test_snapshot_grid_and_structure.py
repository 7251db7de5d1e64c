"""What a replay step hands the builder (issue 25): a MetricGrid builds exactly the snapshot its
per-family series build, and a builder reusing the last structure (GPU order, nodes, pods,
jobs) gives exactly what a fresh builder gives."""

from __future__ import annotations

import dataclasses

import numpy as np

from observer.snapshot.builder import SnapshotBuilder
from observer.snapshot.inputs import ExporterHealth, GpuColumns
from observer.snapshot.json_dump import snapshot_to_dict
from observer.snapshot.metric_grid import MetricGrid
from tests.snapshot_fixtures import NOW, TEMP, UTIL, gpu_rows, node, pod, row

ERRORS = "DCGM_FI_DEV_XID_ERRORS"
CLOCKS_ALIAS = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
NAN = np.nan


def _grid(names: tuple[str, ...], row_of_entry: list[int], rng: np.random.Generator) -> MetricGrid:
    f, n = len(names), len(row_of_entry)
    value = rng.uniform(0, 100, (f, n))
    value[rng.random((f, n)) < 0.2] = NAN
    increase = rng.uniform(0, 5, (f, n))
    increase[rng.random((f, n)) < 0.2] = NAN
    span = np.full((f, n), 60.0)
    span[:, 0] = 95.0  # one GPU's increase covers more than the window (a gap)
    present = rng.random((f, n)) < 0.85
    present[-1] = False  # a family given with no entry at this step still gets its column
    return MetricGrid(
        names=names,
        given=np.array([True] * (f - 2) + [False, True]),
        row=np.asarray(row_of_entry, dtype=np.int64),
        timestamp=NOW - rng.integers(0, 30, n).astype(float),
        present=present,
        value=value,
        increase=increase,
        has_increase=np.array([False, True] + [False] * (f - 2)),
        span=span,
        has_span=np.array([False, True] + [False] * (f - 2)),
        window=np.array([0.0, 60.0] + [0.0] * (f - 2)),
    )


def _both_ways(gpus: GpuColumns, grid: MetricGrid) -> tuple[dict[str, object], dict[str, object]]:
    b = SnapshotBuilder()
    fast, fast_report = b.build_with_report(NOW, gpus, {}, nodes=[node("n1")], grid=grid)
    slow, slow_report = b.build_with_report(NOW, gpus, grid.series(), nodes=[node("n1")])
    assert fast_report == slow_report
    return snapshot_to_dict(fast), snapshot_to_dict(slow)


def test_grid_builds_what_its_series_build() -> None:
    """Entries in any order, one without a GPU row (-1), a family given without entries: the
    columns (values, times, increases, spans, windows) equal the per-family path's."""
    rows = [row("n1", d) for d in range(6)] + [row("n2", d) for d in range(2)]
    gpus = gpu_rows(rows, [NOW] * len(rows))
    names = (UTIL, ERRORS, TEMP, "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK")
    grid = _grid(names, [5, 0, 7, -1, 2, 1, 3], np.random.default_rng(7))
    fast, slow = _both_ways(gpus, grid)
    assert fast == slow
    metrics = fast["metrics"]
    assert isinstance(metrics, dict)
    assert metrics[ERRORS]["window_seconds"] == 60.0 and "span_seconds" in metrics[ERRORS]
    assert all(v is None for v in metrics["DCGM_FI_DEV_POWER_USAGE"]["value"])


def test_colliding_entries_and_aliases_take_the_series_path() -> None:
    """Two entries on one GPU (duplicate identity rows of a GPU: the newest wins) and a name
    that folds into another family's catalog name are decided by the per-family rules."""
    rows = [row("n1", 0, "old", "ml"), row("n1", 0, "new", "ml"), row("n1", 1)]
    gpus = gpu_rows(rows, [NOW - 30, NOW, NOW])
    rng = np.random.default_rng(3)
    on_one_gpu = _grid((UTIL, ERRORS, TEMP), [0, 1, 2], rng)
    fast, slow = _both_ways(gpus, on_one_gpu)
    assert fast == slow
    alias = _grid((UTIL, ERRORS, CLOCKS_ALIAS, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"), [1, 2], rng)
    fast, slow = _both_ways(gpus, alias)
    assert fast == slow


def test_structure_is_reused_only_for_the_same_columns_and_records() -> None:
    label = "training.kubeflow.org/job-name"
    rows = [row("n1", d, f"w-{d}", "ml") for d in range(4)]
    gpus = gpu_rows(rows, [NOW] * 4)
    later = dataclasses.replace(gpus, timestamp=np.full(4, NOW + 30))  # same label columns
    pods = [pod("ml", f"w-{d}", "n1", **{label: "llama"}) for d in range(4)]
    relabelled = [*pods[:3], pod("ml", "w-3", "n1", **{label: "other"})]
    up = ExporterHealth(up={"n1": True})
    down_elsewhere = ExporterHealth(up={"n1": True, "n9": False})
    cases = [
        (gpus, pods, up),
        (later, pods, up),  # hit: only times moved
        (later, list(pods), up),  # hit: equal records
        (later, relabelled, up),  # miss: a pod's labels changed
        (later, relabelled, down_elsewhere),  # miss: an exporter names another node
        (gpu_rows(rows, [NOW] * 4), relabelled, down_elsewhere),  # miss: new columns
    ]
    fresh, cached = SnapshotBuilder(), SnapshotBuilder().with_pod_cache()
    for g, records, ex in cases:
        a = fresh.build(NOW, g, {}, nodes=[node("n1")], pods=records, exporters=ex)
        b = cached.build(NOW, g, {}, nodes=[node("n1")], pods=records, exporters=ex)
        assert snapshot_to_dict(a) == snapshot_to_dict(b)
    assert cached.structure_cache is not None
    assert (cached.structure_cache.hits, cached.structure_cache.misses) == (2, 4)
    assert [n.name for n in b.nodes] == ["n1", "n9"]
    assert [j.key for j in b.jobs] == ["ml/llama", "ml/other"]


def test_structure_from_duplicate_rows_is_not_reused() -> None:
    """With two rows of one GPU the newest row decides its pod: new times, new structure."""
    rows = [row("n1", 0, "a", "ml"), row("n1", 0, "b", "ml")]
    cols = gpu_rows(rows, [NOW, NOW - 30])
    flipped = dataclasses.replace(cols, timestamp=np.array([NOW - 30, NOW]))
    cached = SnapshotBuilder().with_pod_cache()
    first = cached.build(NOW, cols, {})
    second = cached.build(NOW, flipped, {})
    assert first.pods[first.gpus.pod_index[0]].name == "a"
    assert second.pods[second.gpus.pod_index[0]].name == "b"
