"""gpu_xid on hand-built snapshots and the collectors' XID parsing at the wire level: per-code
counts, cascades, shared GPUs (issue 27)."""

from __future__ import annotations

from typing import Any

import numpy as np

from detectors import gpu_xid
from detectors.findings import Severity
from detectors.signals import XID
from observer.fleet.catalog import XID_COUNT_METRIC, xid_count_column
from observer.fleet.model import FleetSnapshot
from observer.prometheus.parse import fresh_xid_counts
from observer.prometheus.plan import TS_LABEL
from observer.scrape.exposition import parse_page
from observer.snapshot import GpuColumns, MetricSeries, build_snapshot
from tests.detector_replay import all_findings, replay, steps
from tests.fleet import Fleet

T0 = 1_767_225_600.0
GPU = (0, 3)


def test_an_uncontained_ecc_error_behind_its_follower_is_critical() -> None:
    """The issue's check: gauge 45, count series xid=95 and xid=45 -> XID 95, critical."""
    fleet = Fleet(nodes=1).set(XID, 0.0).set(XID_COUNT_METRIC, 0.0)

    def change(f: Fleet, t: float) -> None:
        if t >= T0 + 60:
            f.set(XID, 45.0, gpu=GPU).set(XID_COUNT_METRIC, 2.0, gpu=GPU)
            f.set(xid_count_column(95), 1.0, gpu=GPU).set(xid_count_column(45), 1.0, gpu=GPU)

    found = all_findings(replay("gpu_xid", fleet, steps(T0, T0 + 120), change))
    assert found and {(f.evidence["xid"], f.severity) for f in found} == {(95, Severity.CRITICAL)}
    assert found[0].evidence["xids_in_window"] == {"45": 1, "95": 1}
    assert not found[0].pre_existing


def test_a_later_follower_does_not_replace_the_fault_and_a_worse_code_does() -> None:
    fleet = Fleet(nodes=1).set(XID, 0.0).set(XID_COUNT_METRIC, 0.0)

    def change(f: Fleet, t: float) -> None:
        if t >= T0 + 30:  # a graphics exception (13) ...
            f.set(XID, 13.0, gpu=GPU).set(xid_count_column(13), 1.0, gpu=GPU)
        if t >= T0 + 60:  # ... its follower 43 a cycle later ...
            f.set(XID, 43.0, gpu=GPU).set(xid_count_column(43), 1.0, gpu=GPU)
        if t >= T0 + 120:  # ... then a double-bit ECC error
            f.set(XID, 48.0, gpu=GPU).set(xid_count_column(48), 1.0, gpu=GPU)

    cycles = replay("gpu_xid", fleet, steps(T0, T0 + 150), change)
    codes = [fs[0].evidence["xid"] for _, fs in cycles if fs]
    assert codes == [13, 13, 13, 48, 48]


def test_with_only_the_gauge_a_follower_says_what_it_may_hide() -> None:
    fleet = Fleet(nodes=1).set(XID, 0.0)

    def change(f: Fleet, t: float) -> None:
        f.set(XID, 45.0 if t >= T0 + 30 else 0.0, gpu=GPU)

    found = all_findings(replay("gpu_xid", fleet, steps(T0, T0 + 60), change))
    assert found and found[0].evidence["xid"] == 45
    assert "48, 94, 95" in found[0].evidence["note"]
    assert "DCGM_EXP_XID_ERRORS_COUNT" in found[0].evidence["note"]


def test_a_sticky_gauge_is_not_new_evidence_until_it_changes() -> None:
    """A gauge that kept 31 since before gpufleet started (the exporter never restarted) is old
    news; the exporter restarting empties it, and the same code coming back is a new XID."""
    fleet = Fleet(nodes=1).set(XID, 31.0, gpu=GPU)

    def change(f: Fleet, t: float) -> None:
        f.set(XID, 0.0 if T0 + 60 <= t < T0 + 120 else 31.0, gpu=GPU)

    cycles = replay("gpu_xid", fleet, steps(T0, T0 + 150), change)
    assert [bool(fs) for _, fs in cycles] == [False, False, False, False, True, True]
    assert not cycles[-1][1][0].pre_existing


PAGE = """# TYPE DCGM_EXP_XID_ERRORS_COUNT counter
DCGM_EXP_XID_ERRORS_COUNT{gpu="0",UUID="GPU-a",Hostname="n1",pod="p1",vgpu="0",window_size_in_ms="300000",xid="48"} 1
DCGM_EXP_XID_ERRORS_COUNT{gpu="0",UUID="GPU-a",Hostname="n1",pod="p2",vgpu="1",window_size_in_ms="300000",xid="45"} 1
DCGM_EXP_XID_ERRORS_COUNT{gpu="0",UUID="GPU-a",Hostname="n1",pod="p1",vgpu="0",window_size_in_ms="300000",xid="45"} 1
DCGM_EXP_XID_ERRORS_COUNT{gpu="0",UUID="GPU-a",Hostname="n1",pod="p2",vgpu="1",window_size_in_ms="300000",xid="48"} 1
DCGM_EXP_XID_ERRORS_COUNT{gpu="1",UUID="GPU-b",Hostname="n1",window_size_in_ms="300000"} 0
"""  # noqa: E501


def test_a_page_keeps_each_code_once_per_gpu_whatever_the_pods_sharing_it() -> None:
    """Virtual-GPU series (one per pod on a time-sliced GPU) repeat the GPU's counts."""
    page = parse_page(PAGE)
    cols = {name: dict(zip(k, v, strict=True)) for name, (k, v, _) in page.gpu.items()}
    assert cols[XID_COUNT_METRIC] == {"GPU-a": 2.0, "GPU-b": 0.0}
    assert cols[xid_count_column(48)] == {"GPU-a": 1.0}
    assert cols[xid_count_column(45)] == {"GPU-a": 1.0}


def _row(labels: dict[str, str], v: float) -> dict[str, Any]:
    return {"metric": {"__name__": XID_COUNT_METRIC, **labels}, "value": [100.0, str(v)]}


def _stamp(labels: dict[str, str], t: float) -> dict[str, Any]:
    return {"metric": {**labels, TS_LABEL: "1"}, "value": [100.0, str(t)]}


def test_prometheus_answer_keeps_each_code_once_per_gpu() -> None:
    rows: list[dict[str, Any]] = []
    for pod, vgpu in (("p1", "0"), ("p2", "1")):
        for code in ("48", "45"):
            lab = {"UUID": "GPU-a", "pod": pod, "vgpu": vgpu, "xid": code}
            rows += [_row(lab, 1.0), _stamp(lab, 100.0)]
    zero = {"UUID": "GPU-b", "window_size_in_ms": "300000"}
    rows += [_row(zero, 0.0), _stamp(zero, 100.0)]
    out = fresh_xid_counts(rows, {"GPU-a": 100.0, "GPU-b": 100.0})
    totals = {r["metric"]["UUID"]: float(r["value"][1]) for r in out[XID_COUNT_METRIC]}
    assert totals == {"GPU-a": 2.0, "GPU-b": 0.0}
    assert [float(r["value"][1]) for r in out[xid_count_column(48)]] == [1.0]


def _mig_snapshot(t: float, xid: float, count: float) -> FleetSnapshot:
    """One H100 in MIG flex mode with two instances: dcgm-exporter writes only per-instance
    series, device fields (the XID gauge and count) repeated on each."""
    uuid = ["GPU-m", "GPU-m"]
    mig = ["1", "2"]
    gpus = GpuColumns.from_labels(
        {"UUID": uuid, "GPU_I_ID": mig, "GPU_I_PROFILE": ["3g.40gb", "3g.40gb"],
         "Hostname": ["n1", "n1"], "gpu": ["0", "0"], "modelName": ["NVIDIA H100"] * 2},
        [t, t],
    )  # fmt: skip
    cols = {
        XID: [xid, xid],
        XID_COUNT_METRIC: [count, count],
        xid_count_column(48): [count, count],
    }
    metrics = {
        name: MetricSeries(np.array(v), np.array([t, t]), np.array(uuid, dtype=object),
                           np.array(mig, dtype=object))
        for name, v in cols.items()
    }  # fmt: skip
    return build_snapshot(t, gpus, metrics)


def test_a_mig_gpu_xid_is_one_finding_for_the_physical_gpu() -> None:
    state = None
    found: list[Any] = []
    for k, (x, c) in enumerate([(0.0, 0.0), (48.0, 1.0), (48.0, 1.0)]):
        t = T0 + 30 * k
        found, state = gpu_xid.detect(_mig_snapshot(t, x, c), state, t, gpu_xid.Params())
    assert len(found) == 1  # not one per instance
    f = found[0]
    assert (f.gpu_uuid, f.evidence["xid"], f.severity) == ("GPU-m", 48, Severity.CRITICAL)
    assert f.evidence["mig_instances"] == ["1", "2"]
