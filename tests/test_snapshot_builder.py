"""The snapshot builder: joins, hostnames, MIG, unknown nodes, duplicates, NaN, telemetry,
immutability, canonical order, and the simulator's layout end to end."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from observer.fleet.model import NO_INDEX, NodeName, Pod, frozen_map
from observer.snapshot.builder import SnapshotBuilder, build_snapshot
from observer.snapshot.gpu_rows import NO_HOSTNAME
from observer.snapshot.inputs import ExporterHealth, GpuColumns, MetricSeries, PodSeries
from observer.snapshot.json_dump import snapshot_to_dict
from observer.snapshot.telemetry_health import infer_scrape_interval, snap_interval
from simulator.layout import build_layout
from simulator.scenario import demo_scenario
from tests.snapshot_fixtures import (
    NOW,
    TEMP,
    UTIL,
    gpu_rows,
    node,
    obj,
    pod,
    row,
    series,
    two_node_fleet,
)


def test_gpus_join_nodes_pods_and_jobs_in_canonical_order() -> None:
    snap = two_node_fleet()
    assert snap.node_names() == ("n1", "n2")
    g = snap.gpus
    assert list(g.uuid) == [f"GPU-n1-{d}" for d in range(2)] + [f"GPU-n2-{d}" for d in range(4)]
    assert list(g.node_index) == [0, 0, 1, 1, 1, 1]
    assert list(g.device_index) == [0, 1, 0, 1, 2, 3]
    assert [snap.pods[i].name if i >= 0 else None for i in g.pod_index] == [
        None,
        None,
        "train-worker-0",
        "train-worker-0",
        "train-worker-1",
        "train-worker-1",
    ]
    assert list(g.job_index) == [NO_INDEX, NO_INDEX, 0, 0, 0, 0]
    assert snap.jobs[0].key == "ml/train"
    assert snap.jobs[0].kind == "training.kubeflow.org/job-name"
    assert [snap.pods[i].rank for i in snap.jobs[0].pod_indices] == [0, 1]
    assert list(snap.metrics[UTIL].value) == [14, 15, 10, 11, 12, 13]
    assert g.models == ("NVIDIA H100 80GB HBM3",)
    assert list(snap.gpus_of_job(0)) == [2, 3, 4, 5]


def test_hostname_and_Hostname_both_accepted() -> None:
    old = {**row("a", 0)}
    new = {k: v for k, v in row("b", 0).items() if k != "Hostname"} | {"hostname": "b"}
    snap = build_snapshot(NOW, gpu_rows([old, new]), {})
    assert snap.node_names() == ("a", "b")
    cols = GpuColumns.from_labels(
        {"UUID": ["u1", "u2"], "hostname": ["x", "y"], "gpu": ["0", "1"], "modelName": ["m", "m"]}
    )
    assert list(cols.hostname) == ["x", "y"]
    both = GpuColumns.from_labels(
        {"UUID": ["u1", "u2"], "Hostname": ["x", ""], "hostname": ["", "y"], "gpu": ["0", "0"]}
    )
    assert list(both.hostname) == ["x", "y"]


def test_mig_instances_are_rows_of_their_own() -> None:
    rows = [
        row("n", 0, GPU_I_ID="2", GPU_I_PROFILE="3g.40gb"),
        row("n", 0, GPU_I_ID="1", GPU_I_PROFILE="3g.40gb"),
        row("n", 1),
        row("n", 0, GPU_I_ID="10", GPU_I_PROFILE="1g.10gb"),
    ]
    uuid = obj([r["UUID"] for r in rows])
    mig = obj([r.get("GPU_I_ID", "") for r in rows])
    util = MetricSeries(
        np.array([2.0, 1.0, 5.0, 10.0]), np.full(4, NOW), uuid=uuid, mig_instance=mig
    )
    snap = build_snapshot(NOW, gpu_rows(rows), {UTIL: util})
    g = snap.gpus
    assert list(g.mig_instance) == ["1", "2", "10", ""]
    assert list(g.mig_profile) == ["3g.40gb", "3g.40gb", "1g.10gb", ""]
    assert list(g.device_index) == [0, 0, 0, 1]
    assert list(snap.metrics[UTIL].value) == [1.0, 2.0, 10.0, 5.0]


def test_gpus_on_nodes_unknown_to_kubernetes_are_kept() -> None:
    rows = [row("known", 0), row("ghost", 0), {**row("x", 1), "Hostname": ""}]
    builder = SnapshotBuilder()
    snap, report = builder.build_with_report(
        NOW,
        gpu_rows(rows),
        {},
        nodes=[node("known"), node("cpu-only")],
        exporters=ExporterHealth(up={"exporter-without-gpus": False}),
    )
    names = snap.node_names()
    assert set(names) == {"known", "cpu-only", "ghost", NO_HOSTNAME, "exporter-without-gpus"}
    assert len(snap.gpus) == 3
    flags: dict[str, bool] = {n.name: n.in_kubernetes for n in snap.nodes}
    assert flags["known"] and flags["cpu-only"]
    assert not flags["ghost"] and not flags[NO_HOSTNAME]
    assert set(report.nodes_not_in_kubernetes) == {"ghost", NO_HOSTNAME, "exporter-without-gpus"}
    assert snap.nodes[names.index("known")].ready


def test_pods_named_only_by_gpu_labels_are_synthesised() -> None:
    rows = [row("n", 0, "orphan-0", "ns"), row("n", 1, "orphan-0", "ns")]
    snap, report = SnapshotBuilder().build_with_report(NOW, gpu_rows(rows), {})
    assert report.pods_from_gpu_labels == ("ns/orphan-0",)
    (p,) = snap.pods
    assert (p.key, p.node, p.phase) == ("ns/orphan-0", "n", "Unknown")
    assert list(snap.gpus.pod_index) == [0, 0]


def test_duplicates_resolve_to_the_newest_sample() -> None:
    rows = [row("n", 0), row("n", 1)]
    u0, u1 = rows[0]["UUID"], rows[1]["UUID"]
    replica_a = series([u0, u1], [1.0, 2.0], [NOW - 30, NOW])
    replica_b = series([u1, u0], [3.0, 4.0], [NOW - 15, NOW - 15])
    snap, report = SnapshotBuilder().build_with_report(
        NOW, gpu_rows(rows), {UTIL: [replica_a, replica_b]}
    )
    assert list(snap.metrics[UTIL].value) == [4.0, 2.0]
    assert list(snap.metrics[UTIL].timestamp) == [NOW - 15, NOW]
    assert report.duplicate_series == {UTIL: 2}
    # identity rows: the newest row wins (a pod label that appeared later)
    dup_rows = [row("n", 0), row("n", 0, "p-0", "ns")]
    snap2, report2 = SnapshotBuilder().build_with_report(
        NOW, gpu_rows(dup_rows, [NOW, NOW - 60]), {}
    )
    assert report2.duplicate_identity_rows == 1
    assert list(snap2.gpus.pod_index) == [NO_INDEX]
    snap3 = build_snapshot(NOW, gpu_rows(dup_rows, [NOW - 60, NOW]), {})
    assert snap3.pods[snap3.gpus.pod_index[0]].name == "p-0"


def test_series_keyed_by_row_and_duplicated_identity_rows() -> None:
    rows = [row("n", 1), row("n", 0), row("n", 1)]
    by_row = MetricSeries(
        np.array([7.0, 8.0, 9.0]), np.array([NOW - 1, NOW, NOW]), row=np.array([0, 1, 2])
    )
    snap = build_snapshot(NOW, gpu_rows(rows), {TEMP: by_row})
    assert list(snap.metrics[TEMP].value) == [8.0, 9.0]
    with pytest.raises(ValueError, match="exactly one"):
        MetricSeries(np.zeros(1), np.zeros(1))


def test_missing_metrics_are_nan_and_aliases_fold() -> None:
    rows = [row("n", 0), row("n", 1)]
    u0 = rows[0]["UUID"]
    throttle = series([u0], [8.0])
    snap, report = SnapshotBuilder().build_with_report(
        NOW,
        gpu_rows(rows),
        {
            UTIL: series([u0, "GPU-not-in-inventory"], [50.0, 1.0]),
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": throttle,
        },
    )
    util = snap.metrics[UTIL]
    assert util.value[0] == 50.0 and np.isnan(util.value[1]) and np.isnan(util.timestamp[1])
    assert list(util.present()) == [True, False]
    assert report.unknown_series == {UTIL: 1}
    assert snap.metrics["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"].value[0] == 8.0
    assert "DCGM_FI_DEV_CLOCKS_EVENT_REASONS" not in snap.metrics
    ecc = snap.metric("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")  # never collected: all NaN
    assert ecc is not None and np.isnan(ecc.value).all()
    assert np.isnan(ecc.rate()).all()


def test_counter_increase_and_steps_per_job() -> None:
    rows = [row("n", 0, "t-0", "ml"), row("m", 0, "t-1", "ml")]
    uuids = [r["UUID"] for r in rows]
    pcie = MetricSeries(
        np.array([100.0, 5.0]),
        np.full(2, NOW),
        uuid=obj(uuids),
        increase=np.array([60.0, 0.0]),
        window_seconds=300.0,
    )
    pods = [pod("ml", f"t-{i}", h, **{"job-name": "t"}) for i, h in ((0, "n"), (1, "m"))]
    steps = PodSeries(
        obj(["ml", "ml", "ml"]),
        obj(["t-0", "t-1", "t-1"]),
        np.array([100.0, 90.0, 80.0]),
        np.array([NOW, NOW, NOW - 30]),
        np.array([10.0, 0.0, 5.0]),
    )
    snap = build_snapshot(
        NOW, gpu_rows(rows), {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER": pcie}, pods=pods, steps=steps
    )
    col = snap.metrics["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"]
    assert list(col.rate()) == [0.0, 0.2]  # node m sorts before node n
    assert dict(snap.job_steps) == {"ml/t": 190.0}
    assert dict(snap.job_steps_increase) == {"ml/t": 10.0}


def test_scrape_interval_inference() -> None:
    rng = np.random.default_rng(1)
    jitter = [NOW + 15.0 * np.arange(40) + rng.normal(0, 0.4, 40) for _ in range(3)]
    assert infer_scrape_interval(jitter) == 15.0
    gappy = np.delete(NOW + 30.0 * np.arange(20), [5, 11])  # two missed scrapes
    assert infer_scrape_interval([gappy]) == 30.0
    assert infer_scrape_interval([NOW + 61.0 * np.arange(5)]) == 60.0
    assert infer_scrape_interval([]) == 30.0
    assert infer_scrape_interval([np.array([NOW])], default=15.0) == 15.0
    assert snap_interval(45.2) == 45.0
    assert snap_interval(9.6) == 10.0


def test_telemetry_health_per_node() -> None:
    rows = [row("fresh", 0), row("fresh", 1), row("stale", 0), row("silent", 0)]
    uuids = [r["UUID"] for r in rows]
    util = series(uuids[:3], [1.0, 2.0, 3.0], [NOW - 40, NOW - 10, NOW - 300])
    times = [NOW - 15.0 * np.arange(10)[::-1]]
    snap = build_snapshot(
        NOW,
        gpu_rows(rows),
        {UTIL: util},
        exporters=ExporterHealth(
            up={"stale": True},
            last_scrape={"silent": NOW - 5},
            sample_times=times,
            source_ok=False,
            degraded_reason="prometheus partial response",
        ),
    )
    t = snap.telemetry
    assert t is not None and t.scrape_interval == 15.0
    idx = snap.node_index()
    assert t.node_last_sample[idx["fresh"]] == NOW - 10
    assert t.node_last_sample[idx["stale"]] == NOW - 300
    assert t.node_last_sample[idx["silent"]] == NOW - 5
    assert bool(t.node_up[idx["fresh"]])
    assert bool(t.node_up[idx["stale"]])  # the collector's `up` wins over inference
    assert bool(t.node_up[idx["silent"]])
    assert list(t.node_age(NOW))[idx["fresh"]] == 10
    assert not t.source_ok and "partial" in t.degraded_reason
    no_up = build_snapshot(
        NOW, gpu_rows(rows), {UTIL: util}, exporters=ExporterHealth(scrape_interval=15.0)
    )
    assert no_up.telemetry is not None
    assert [bool(no_up.telemetry.node_up[idx[n]]) for n in ("fresh", "stale", "silent")] == [
        True,
        False,
        False,
    ]


def test_snapshot_is_immutable() -> None:
    snap = two_node_fleet()
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.taken_at = 0.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.gpus.uuid = obj([])  # type: ignore[misc]
    arrays = [
        getattr(snap.gpus, f.name)
        for f in dataclasses.fields(snap.gpus)
        if isinstance(getattr(snap.gpus, f.name), np.ndarray)
    ]
    for col in snap.metrics.values():
        arrays += [col.value, col.timestamp]
    assert snap.telemetry is not None
    arrays += [snap.telemetry.node_last_sample, snap.telemetry.node_up]
    assert len(arrays) > 10
    for arr in arrays:
        assert not arr.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            arr[...] = arr
    with pytest.raises(TypeError):
        snap.metrics[UTIL] = snap.metrics[UTIL]  # type: ignore[index]
    with pytest.raises(TypeError):
        snap.pods[0].labels["x"] = "y"  # type: ignore[index]


def test_input_order_does_not_change_the_snapshot() -> None:
    rows = [row(f"n{i % 5}", i // 5, f"p{i % 5}", "ns") for i in range(20)]
    uuids = [r["UUID"] for r in rows]
    values = np.arange(20.0)
    perm = np.random.default_rng(3).permutation(20)
    a = build_snapshot(NOW, gpu_rows(rows), {UTIL: series(uuids, values)})
    b = build_snapshot(
        NOW,
        gpu_rows([rows[i] for i in perm]),
        {UTIL: series([uuids[i] for i in perm], values[perm])},
    )
    assert list(a.gpus.uuid) == list(b.gpus.uuid)
    assert np.array_equal(a.metrics[UTIL].value, b.metrics[UTIL].value)
    assert np.array_equal(a.gpus.pod_index, b.gpus.pod_index)
    assert a.pods == b.pods and a.nodes == b.nodes


def test_empty_fleet() -> None:
    snap = build_snapshot(NOW, gpu_rows([]), {})
    assert len(snap.gpus) == 0 and snap.nodes == () and snap.jobs == ()
    assert snap.telemetry is not None and snap.telemetry.node_up.shape == (0,)


def test_simulated_layout_round_trips_through_the_builder() -> None:
    """Pods labelled the way the simulator (and real operators) label them."""
    sc = demo_scenario()
    lay = build_layout(sc)
    gpu_pod = {}
    for p in lay.pods:
        for d in p.gpu_indices:
            gpu_pod[lay.gpu_position(p.node, d)] = p
    labels = [
        {
            "UUID": lay.gpu_uuid[i],
            "Hostname": lay.nodes[lay.gpu_node[i]].name,
            "gpu": str(lay.gpu_device[i]),
            "modelName": lay.gpu_model[i],
            "pod": gpu_pod[i].name if i in gpu_pod else "",
            "namespace": gpu_pod[i].namespace if i in gpu_pod else "",
        }
        for i in range(len(lay.gpu_uuid))
    ]
    pods = [
        Pod(
            p.namespace,
            p.name,
            NodeName(p.node),
            labels=frozen_map(p.labels),
            owner_kind=p.owner_kind,
            owner_name=p.owner_name,
        )
        for p in lay.pods
    ]
    snap = build_snapshot(
        NOW, gpu_rows(labels), {}, nodes=[node(n.name) for n in lay.nodes], pods=pods
    )
    assert len(snap.gpus) == sc.gpu_count
    training = {p.workload for p in lay.pods if p.kind.value == "training"}
    assert {j.key for j in snap.jobs} == training
    for sim in lay.pods:
        rec = next(p for p in snap.pods if p.key == sim.key)
        if sim.workload in training:
            assert snap.jobs[rec.job_index].key == sim.workload
            assert rec.rank == sim.rank
        else:
            assert rec.job_index == NO_INDEX
    for i in range(len(snap.gpus)):
        p = snap.gpus.pod_index[i]
        if p != NO_INDEX:
            assert snap.nodes[snap.gpus.node_index[i]].name == snap.pods[p].node


def test_module_docstring_example() -> None:
    import doctest

    import observer.snapshot.builder as module

    assert doctest.testmod(module).failed == 0


def test_columns_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        MetricSeries(np.zeros(2), np.zeros(3), uuid=obj(["a", "b"]))
    with pytest.raises(ValueError, match="GpuColumns columns differ in length"):
        GpuColumns(obj(["a"]), obj(["h", "h"]), np.zeros(1, np.int32), obj(["m"]))


def test_pod_cache_reuses_only_identical_assignments() -> None:
    """A builder with a pod cache (collectors running cycles in time order) gives exactly the
    snapshot a fresh builder gives, reusing the assignment only when pods and GPUs repeat."""
    label = "training.kubeflow.org/job-name"
    fresh, cached = SnapshotBuilder(), SnapshotBuilder().with_pod_cache()
    rows = [row("n1", d, f"w-{d}", "ml") for d in range(4)]
    pods = [pod("ml", f"w-{d}", "n1", **{label: "llama"}) for d in range(4)]
    moved = [row("n1", d, f"w-{(d + 1) % 4}", "ml") for d in range(4)]  # ranks swap GPUs
    relabelled = [*pods[:3], pod("ml", "w-3", "n1", **{label: "other"})]
    cases = [(rows, pods), (rows, pods), (moved, pods), (moved, relabelled), (moved, relabelled)]
    for gpus, records in cases:
        a = fresh.build(NOW, gpu_rows(gpus), {}, pods=records)
        b = cached.build(NOW, gpu_rows(gpus), {}, pods=records)
        assert b.pods == a.pods and b.jobs == a.jobs
        assert np.array_equal(b.gpus.pod_index, a.gpus.pod_index)
        assert np.array_equal(b.gpus.job_index, a.gpus.job_index)
    assert cached.pod_cache is not None
    assert (cached.pod_cache.hits, cached.pod_cache.misses) == (2, 3)
    assert [j.key for j in cached.build(NOW, gpu_rows(moved), {}, pods=relabelled).jobs] == [
        "ml/llama",
        "ml/other",
    ]
    assert cached == SnapshotBuilder()  # the cache is not part of the configuration


def test_increase_span_reaches_rates_and_the_json_dump() -> None:
    """A counter's per-GPU span (seconds its increase covers, e.g. after a gap) is what rates
    divide by, and `gpufleet collect --output` writes it next to the increase."""
    rows = [row("n", 0), row("n", 1)]
    pcie = MetricSeries(
        np.array([100.0, 50.0]), np.full(2, NOW), uuid=obj([r["UUID"] for r in rows]),
        increase=np.array([60.0, 60.0]), window_seconds=120.0, span=np.array([120.0, 600.0]),
    )  # fmt: skip
    snap = build_snapshot(NOW, gpu_rows(rows), {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER": pcie})
    col = snap.metrics["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"]
    assert list(col.rate()) == [0.5, 0.1]
    dumped = snapshot_to_dict(snap)["metrics"]["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"]
    assert dumped["span_seconds"] == [120.0, 600.0] and dumped["window_seconds"] == 120.0
    assert "span_seconds" not in snapshot_to_dict(snap)["metrics"]["DCGM_FI_DEV_GPU_UTIL"]
