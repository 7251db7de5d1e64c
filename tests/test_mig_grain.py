"""MIG GPUs (dcgm-exporter's flex mode: per-instance series only) stay at the grain of the
physical GPU: re-partitioning one is not a lost GPU (issue 27, finding 4)."""

from __future__ import annotations

import numpy as np

from detectors import gpu_lost
from detectors.findings import Finding
from observer.fleet.model import FleetSnapshot
from observer.snapshot import GpuColumns, MetricSeries, build_snapshot

T0 = 1_767_225_600.0
UTIL = "DCGM_FI_DEV_FB_USED"  # a device field every instance carries (GPU_UTIL is not on MIG)


def _snapshot(t: float, rows: list[tuple[str, str, float]]) -> FleetSnapshot:
    """(UUID, GPU_I_ID, last sample time) rows on one node; a row whose last sample is older
    than `t` is one whose series vanished (the collectors keep it, with no data)."""
    uuid = [r[0] for r in rows]
    mig = [r[1] for r in rows]
    gpus = GpuColumns.from_labels(
        {"UUID": uuid, "GPU_I_ID": mig, "GPU_I_PROFILE": ["3g.40gb" if m else "" for m in mig],
         "Hostname": ["n1"] * len(rows), "gpu": ["0" if u == "GPU-m" else "1" for u in uuid],
         "modelName": ["NVIDIA H100"] * len(rows)},
        [r[2] for r in rows],
    )  # fmt: skip
    fresh = [i for i, r in enumerate(rows) if r[2] >= t]
    series = MetricSeries(
        np.full(len(fresh), 1000.0),
        np.full(len(fresh), t),
        np.array([uuid[i] for i in fresh], dtype=object),
        np.array([mig[i] for i in fresh], dtype=object),
    )
    return build_snapshot(t, gpus, {UTIL: series})


Row = tuple[str, str, float | None]


def _run(layouts: list[list[Row]]) -> list[list[Finding]]:
    state = None
    out: list[list[Finding]] = []
    for k, rows in enumerate(layouts):
        t = T0 + 30 * k
        snap = _snapshot(t, [(u, m, t if at is None else at) for u, m, at in rows])
        found, state = gpu_lost.detect(snap, state, t, gpu_lost.Params())
        out.append(found)
    return out


def test_repartitioning_a_mig_gpu_is_not_a_lost_gpu() -> None:
    before: list[Row] = [("GPU-m", "1", None), ("GPU-m", "2", None), ("GPU-w", "", None)]
    # instance 2 is destroyed at 60 s (its series stop; collectors keep the row a while) and
    # instance 3 created; the physical GPU keeps reporting through instances 1 and 3
    after: list[Row] = [("GPU-m", "1", None), ("GPU-m", "2", T0 + 30), ("GPU-m", "3", None),
             ("GPU-w", "", None)]  # fmt: skip
    cycles = _run([before, before, *[after] * 6])
    assert [f for found in cycles for f in found] == []
    # the control: a whole GPU that goes silent on the same node is lost
    silent: list[Row] = [("GPU-m", "1", None), ("GPU-m", "2", None), ("GPU-w", "", T0 + 30)]
    late = _run([before, before, *[silent] * 6])[-1]
    assert [f.gpu_uuid for f in late] == ["GPU-w"]
