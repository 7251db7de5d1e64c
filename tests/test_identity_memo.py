"""Readings remembered by the identity of the snapshot parts they came from: handed back for the
very same parts only, never for equal-looking new ones, and read-only once shared."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from detectors.identity_memo import IdentityMemo
from detectors.signals import UTIL, telemetry_view, value
from harness.benchmark_fleet import Fleet


def test_same_objects_reuse_and_new_objects_recompute() -> None:
    memo: IdentityMemo[list[int]] = IdentityMemo()
    a, b = (1, 2, 3), (1, 2, 3)
    calls: list[int] = []

    def compute(k: int) -> list[int]:
        calls.append(k)
        return [k]

    first = memo.get((a,), lambda: compute(1))
    assert memo.get((a,), lambda: compute(2)) is first
    assert memo.get((list(b),), lambda: compute(3)) == [3]  # equal, not the same object
    assert calls == [1, 3]


def test_telemetry_view_follows_each_snapshot_even_with_its_parts_reused() -> None:
    """Replay hands the same GPU table and nodes again; the samples are new every cycle."""
    fleet = Fleet(1_000)
    _, first = fleet.snapshot(0)
    for k in range(1, 4):
        now, snap = fleet.snapshot(k)
        snap = dataclasses.replace(snap, gpus=first.gpus)
        view = telemetry_view(snap, now, 1.5, 0.5)
        newest = np.full(len(snap.gpus), -np.inf)
        for col in snap.metrics.values():
            newest = np.maximum(newest, col.timestamp)
        assert np.array_equal(view.gpu_age, now - newest)
        assert not view.node_up[fleet.silent_node] and view.node_up[:-1].all()
        with pytest.raises(ValueError):
            view.node_has_gpus[0] = False  # shared with the next detector: read-only


def test_a_reading_is_shared_within_a_snapshot_and_fresh_for_the_next() -> None:
    fleet = Fleet(1_000)
    now, snap = fleet.snapshot(0)
    util = value(snap, UTIL, now, 75.0)
    assert util is not None and value(snap, UTIL, now, 75.0) is util
    with pytest.raises(ValueError):
        util[0] = 0.0
    stale = value(snap, UTIL, now + 1_000.0, 75.0)  # later: every sample too old
    assert stale is not None and np.isnan(stale).all()
    later, nxt = fleet.snapshot(1)
    col = nxt.metrics[UTIL]
    want = np.where(later - col.timestamp <= 75.0, col.value, np.nan)
    got = value(nxt, UTIL, later, 75.0)
    assert got is not None and np.array_equal(got, want, equal_nan=True)
