"""Field coverage (issue 11): which detectors run on full evidence, on reduced evidence (and
what they infer from), and which cannot run, for a plain set of present DCGM field names."""

from __future__ import annotations

from detectors.coverage import NEEDS, Evidence, coverage, notices
from detectors.findings import FindingKind, Severity
from detectors.gpu_memory import DBE, REMAP_PENDING, RETIRED_DBE, RETIRED_SBE, SBE
from detectors.registry import registry
from detectors.signals import SM_CLOCK, THROTTLE, UTIL, XID
from observer.fleet.catalog import METRICS, XID_COUNT_METRIC

EVERYTHING = {m.name for m in METRICS} | {
    XID_COUNT_METRIC,
    REMAP_PENDING,
    RETIRED_SBE,
    RETIRED_DBE,
}
SHIPPED = {m.name for m in METRICS if m.default_on}
"""dcgm-exporter's default-counters.csv: ECC, NVLink errors and throttle reasons off."""


def test_every_registered_detector_has_its_needs_declared() -> None:
    assert set(NEEDS) == set(registry())


def test_all_fields_present_is_full_evidence_everywhere() -> None:
    assert {c.evidence for c in coverage(EVERYTHING)} == {Evidence.FULL}
    assert notices(coverage(EVERYTHING), 0.0) == []


def test_the_shipped_field_list_runs_hardware_detectors_on_reduced_evidence() -> None:
    report = {c.detector: c for c in coverage(SHIPPED)}
    reduced = {n for n, c in report.items() if c.evidence is Evidence.REDUCED}
    assert reduced == {"gpu_memory", "gpu_throttle", "gpu_interconnect", "gpu_xid"}
    assert all(c.evidence is not Evidence.CANNOT_RUN for c in report.values())
    throttle = report["gpu_throttle"]
    assert throttle.missing == (THROTTLE,)
    assert SM_CLOCK in throttle.infers_from and "DCGM_FI_DEV_GPU_TEMP" in throttle.infers_from
    assert "SM clock" in throttle.notes[0]
    assert throttle.exporter_lines[0].startswith("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, gauge,")
    memory = report["gpu_memory"]
    assert DBE in memory.missing and SBE in memory.missing
    assert "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS" in memory.infers_from
    assert f"{DBE}, counter, " in " ".join(memory.exporter_lines)
    assert report["gpu_interconnect"].infers_from == ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER",)
    assert report["straggler"].evidence is Evidence.FULL
    assert report["gpu_xid"].missing == (XID_COUNT_METRIC,)


def test_a_detector_that_cannot_run_says_so_with_the_exporter_lines() -> None:
    report = coverage(SHIPPED - {XID})
    by = {c.detector: c for c in report}
    assert by["gpu_xid"].evidence is Evidence.CANNOT_RUN
    found = notices(report, 1000.0)
    assert [f.evidence["coverage"]["detector"] for f in found] == ["gpu_xid"]
    f = found[0]
    assert (f.kind, f.severity) == (FindingKind.MONITORING_GAP, Severity.INFO)
    assert "gpu_xid cannot run" in f.summary
    assert "DCGM_FI_DEV_XID_ERRORS, gauge," in f.recommended_action


def test_no_fields_at_all_means_every_detector_says_it_cannot_run() -> None:
    report = coverage(set())
    assert {c.evidence for c in report} == {Evidence.CANNOT_RUN}
    assert len(notices(report, 0.0)) == len(NEEDS)


def test_utilisation_only_keeps_the_job_detectors_running_on_reduced_evidence() -> None:
    by = {c.detector: c for c in coverage({UTIL})}
    assert by["straggler"].evidence is Evidence.REDUCED
    assert by["nccl_hang"].evidence is Evidence.REDUCED
    assert by["gpu_idle"].evidence is Evidence.REDUCED
    assert by["gpu_memory"].evidence is Evidence.CANNOT_RUN


def test_the_newer_clock_events_name_counts_as_throttle_reasons() -> None:
    present = (EVERYTHING - {THROTTLE}) | {"DCGM_FI_DEV_CLOCKS_EVENT_REASONS"}
    assert {c.evidence for c in coverage(present)} == {Evidence.FULL}
