"""The builder's column machinery against plain-Python reference loops (property tests)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from observer.fleet.columns import first_occurrence
from observer.fleet.model import NO_INDEX
from observer.snapshot.builder import SnapshotBuilder, build_snapshot
from observer.snapshot.gpu_rows import resolve_gpu_rows
from observer.snapshot.inputs import MetricSeries
from tests.snapshot_fixtures import (
    NOW,
    TEMP,
    UTIL,
    gpu_rows,
    obj,
    row,
    series,
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 5),  # GPU
            st.one_of(st.none(), st.integers(0, 3)),  # timestamp (None: NaN)
            st.integers(0, 1000),  # value
        ),
        max_size=30,
    ),
    st.booleans(),
)
def test_newest_sample_wins_like_a_plain_loop(
    samples: list[tuple[int, int | None, int]], by_row: bool
) -> None:
    rows = [row("n", d) for d in range(6)]
    ts = np.array([np.nan if t is None else NOW + t for _, t, _ in samples], dtype=float)
    values = np.array([float(v) for _, _, v in samples])
    if by_row:
        s = MetricSeries(values, ts, row=np.array([g for g, _, _ in samples], dtype=np.int32))
    else:
        s = MetricSeries(values, ts, uuid=obj([rows[g]["UUID"] for g, _, _ in samples]))
    snap = build_snapshot(NOW, gpu_rows(rows), {UTIL: s})
    expected: dict[int, tuple[float, float]] = {}
    for (g, _, v), t in zip(samples, ts, strict=True):
        key = -np.inf if np.isnan(t) else t
        if g not in expected or key >= expected[g][0]:
            expected[g] = (key, float(v))
    got = snap.metrics[UTIL].value
    for g in range(6):
        if g in expected:
            assert got[g] == expected[g][1]
        else:
            assert np.isnan(got[g])


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(0, 300),
    dup_rows=st.integers(0, 5),
    keep_p=st.floats(0.0, 1.0),
    shuffle=st.booleans(),
    unknown=st.integers(0, 5),
    seed=st.integers(0, 2**16),
)
def test_series_positions_match_a_plain_dict_lookup(
    n: int, dup_rows: int, keep_p: float, shuffle: bool, unknown: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    rows = [row(f"n{i // 8:03d}", i % 8) for i in range(n)]
    rows += [rows[int(i)] for i in rng.integers(0, max(n, 1), dup_rows)] if n else []
    cols = gpu_rows(rows)
    resolved = resolve_gpu_rows(cols, [])
    keys = [r["UUID"] for r in rows[:n] if rng.random() < keep_p]
    for k in range(unknown):
        keys.insert(int(rng.integers(0, len(keys) + 1)), f"GPU-unknown-{k}")
    if shuffle:
        rng.shuffle(keys)
    s = MetricSeries(np.zeros(len(keys)), np.zeros(len(keys)), uuid=obj(keys))
    gpu_of = {u: i for i, u in enumerate(resolved.keys[resolved.gpu_rows].tolist())}
    expected = [gpu_of.get(k, NO_INDEX) for k in keys]
    assert resolved.positions(s).tolist() == expected


@settings(max_examples=80, deadline=None)
@given(
    base=st.integers(0, 400),
    repeats=st.integers(1, 4),
    drop_p=st.floats(0.0, 0.3),
    shuffle_one=st.booleans(),
    chunk=st.sampled_from([64, 100, 256, 1 << 16]),
    seed=st.integers(0, 2**16),
)
def test_first_occurrence_matches_a_plain_loop(
    base: int, repeats: int, drop_p: float, shuffle_one: bool, chunk: int, seed: int
) -> None:
    """Identity rows gathered series after series: repeats in order, with gaps and new keys."""
    rng = np.random.default_rng(seed)
    keys: list[str] = []
    for r in range(repeats):
        seg = [f"GPU-{i}" for i in range(base) if rng.random() >= drop_p]
        seg.insert(int(rng.integers(0, len(seg) + 1)), f"GPU-new-{r}")
        if shuffle_one and r == repeats - 1:
            rng.shuffle(seg)
        keys += seg
    first, index = first_occurrence(obj(keys), chunk=chunk)
    seen: dict[str, int] = {}
    expected = [seen.setdefault(k, i) for i, k in enumerate(keys)]
    assert first.tolist() == expected
    assert index == seen


def test_identity_rows_from_every_series_give_the_inventory_snapshot() -> None:
    """A collector may pass the labels of all series (one row per series, newest wins)."""
    inventory = [row(f"n{i // 8}", i % 8, f"p{i // 16}", "ns") for i in range(40)]
    uuids = [r["UUID"] for r in inventory]
    util = series(uuids, np.arange(40.0))
    temp = series(uuids[5:], np.arange(35.0) + 100)
    a = build_snapshot(NOW, gpu_rows(inventory), {UTIL: util, TEMP: temp})
    moved = dict(inventory[7], pod="p-new")  # an older series still shows the old pod label
    every = [*inventory, *inventory[5:], moved]
    stamps = [NOW - 10] * 40 + [NOW - 10] * 35 + [NOW - 60]
    by_row = {
        UTIL: MetricSeries(util.value, util.timestamp, row=np.arange(40)),
        TEMP: MetricSeries(temp.value, temp.timestamp, row=np.arange(40, 75)),
    }
    b, report = SnapshotBuilder().build_with_report(NOW, gpu_rows(every, stamps), by_row)
    assert report.duplicate_identity_rows == 36
    assert list(a.gpus.uuid) == list(b.gpus.uuid)
    assert np.array_equal(a.gpus.pod_index, b.gpus.pod_index)
    for name in (UTIL, TEMP):
        assert np.array_equal(a.metrics[name].value, b.metrics[name].value, equal_nan=True)
