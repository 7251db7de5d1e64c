"""Metering on MIG GPUs: instances count by their profile's share of the GPU, and have data
although dcgm-exporter has no GPU_UTIL for them (issue 27, finding 4)."""

from __future__ import annotations

import numpy as np

from detectors.findings import Finding, FindingKind, Severity
from metering.gpu_columns import HEALTH_CODES, Health, gpu_columns
from observer.snapshot import GpuColumns, MetricSeries, build_snapshot

T = 1_767_225_600.0


def test_mig_instances_are_metered_by_profile_share_with_their_activity() -> None:
    uuid = ["GPU-m", "GPU-m", "GPU-w"]
    mig = ["1", "2", ""]
    gpus = GpuColumns.from_labels(
        {"UUID": uuid, "GPU_I_ID": mig, "GPU_I_PROFILE": ["3g.40gb", "4g.40gb", ""],
         "Hostname": ["n1"] * 3, "gpu": ["0", "0", "1"], "modelName": ["NVIDIA H100"] * 3},
        [T] * 3,
    )  # fmt: skip

    def series(values: list[float], rows: list[int]) -> MetricSeries:
        return MetricSeries(
            np.array(values),
            np.full(len(rows), T),
            np.array([uuid[i] for i in rows], dtype=object),
            np.array([mig[i] for i in rows], dtype=object),
        )

    metrics = {
        "DCGM_FI_DEV_GPU_UTIL": series([80.0], [2]),  # the whole GPU only: not on MIG
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": series([0.5, 0.25, 0.8], [0, 1, 2]),
    }
    snap = build_snapshot(T, gpus, metrics)
    xid = Finding(FindingKind.GPU_XID, Severity.CRITICAL, "XID 48", T, T, node="n1",
                  gpu_uuid="GPU-m")  # fmt: skip
    cols = gpu_columns(snap, [xid])
    order = [(str(u), str(m)) for u, m in zip(snap.gpus.uuid, snap.gpus.mig_instance, strict=True)]
    at = {k: i for i, k in enumerate(order)}
    i1, i2, w = at[("GPU-m", "1")], at[("GPU-m", "2")], at[("GPU-w", "")]
    assert cols.weight[[i1, i2, w]].tolist() == [3 / 7, 4 / 7, 1.0]
    assert cols.utilization[[i1, i2, w]].tolist() == [50.0, 25.0, 80.0]
    health = [HEALTH_CODES[h] for h in cols.health[[i1, i2, w]].tolist()]
    assert health == [Health.DEGRADED, Health.DEGRADED, Health.HEALTHY]  # the GPU's XID: both
