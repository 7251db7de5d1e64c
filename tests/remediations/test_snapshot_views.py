"""One cluster view per cluster state: the live cycle and backtests rebuild the view only when
what it is made of changed, and every input of `ClusterView.from_snapshot` is part of that."""

from __future__ import annotations

import dataclasses

import numpy as np

from harness.benchmark_fleet import Fleet
from remediations.cluster_view import ClusterView, SnapshotViews


def test_an_unchanged_cluster_reuses_the_view_stamped_with_the_new_time() -> None:
    fleet = Fleet(64)
    _, first = fleet.snapshot(1)
    views = SnapshotViews()
    built = views(first)
    later = dataclasses.replace(first, taken_at=first.taken_at + 30.0)
    again = views(later)
    assert views.built is built
    assert again.taken_at == later.taken_at
    assert again.pod_of_gpu is built.pod_of_gpu
    assert again == ClusterView.from_snapshot(later)


def test_a_gpu_moving_to_another_pod_or_a_new_sharer_rebuilds_the_view() -> None:
    _, snap = Fleet(64).snapshot(1)
    views = SnapshotViews()
    built = views(snap)
    held = np.flatnonzero(snap.gpus.pod_index >= 0)
    pod_index = snap.gpus.pod_index.copy()
    pod_index[held[0]] = snap.gpus.pod_index[held[-1]]
    moved = dataclasses.replace(snap, gpus=dataclasses.replace(snap.gpus, pod_index=pod_index))
    assert views(moved).pod_of_gpu == ClusterView.from_snapshot(moved).pod_of_gpu
    assert views.built is not built
    shared = dataclasses.replace(moved, shared_pods=((int(held[1]), int(pod_index[held[0]])),))
    assert views(shared).sharers_of_gpu == ClusterView.from_snapshot(shared).sharers_of_gpu
    assert views(shared).sharers_of_gpu  # the sharer is in the view, not a stale one
