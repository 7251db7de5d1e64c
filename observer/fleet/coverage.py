"""Field coverage: which catalog fields a fleet reports, what each detector then runs on, and
the dcgm-exporter lines that turn the missing fields on.

dcgm-exporter's shipped field list (etc/default-counters.csv in NVIDIA/dcgm-exporter) leaves the
ECC counters, the retired-page counters, the NVLink error counters and the `*_VIOLATION`
throttle counters commented out, and has no clock-event (throttle) reasons field at all. A
detector that needs one of them must not go silent about it: `field_coverage(present)` says,
per detector, whether it runs on full evidence, on reduced evidence (and what it infers from
instead), or cannot run, and which CSV lines to add to the exporter's counters file. Pure data
in, data out: `gpufleet collect --summary` prints it, the service can call it every cycle.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

from observer.fleet.catalog import canonical_name
from observer.fleet.model import FleetSnapshot

SHIPPED_DEFAULT_FIELDS = frozenset({
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
})  # fmt: skip
"""The fields uncommented in dcgm-exporter's etc/default-counters.csv (NVIDIA/dcgm-exporter;
older releases lack FB_RESERVED and the DCGM_FI_PROF_* activity fields, recent ones and the GPU
operator's dcp-metrics-included.csv have them). In every release the ECC SBE/DBE counters,
retired pages, NVLink CRC/replay/recovery counters and the *_VIOLATION throttle counters are
commented out, and the clock-event (throttle) reasons field is not listed."""

EXPORTER_CSV_LINES = {
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL":
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, counter, Total number of single-bit volatile ECC errors.",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL":
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, Total number of double-bit volatile ECC errors.",
    "DCGM_FI_DEV_RETIRED_SBE":
        "DCGM_FI_DEV_RETIRED_SBE, counter, Total number of retired pages due to single-bit errors.",
    "DCGM_FI_DEV_RETIRED_DBE":
        "DCGM_FI_DEV_RETIRED_DBE, counter, Total number of retired pages due to double-bit errors.",
    "DCGM_FI_DEV_RETIRED_PENDING":
        "DCGM_FI_DEV_RETIRED_PENDING, counter, Total number of pages pending retirement.",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL":
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, counter, Total number of NVLink "
        "flow-control CRC errors.",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS":
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, gauge, Current clock throttle reasons (bitmask).",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE":
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, Ratio of time the graphics engine is active.",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE":
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, gauge, Ratio of cycles the tensor pipe is active.",
}  # fmt: skip
"""The line to add to the exporter's counters CSV (`-f`/`DCGM_EXPORTER_COLLECTORS`, or the
GPU operator's `dcgmExporter.config`) per field a detector wants; for the ECC, retired-page and
NVLink counters it is the commented-out line of the shipped file, uncommented. On drivers that
name the reasons field DCGM_FI_DEV_CLOCKS_EVENT_REASONS, use that name instead."""


@dataclass(frozen=True, slots=True)
class Need:
    """What one detector reads: `required` (it cannot run without any of them), `wanted`
    (without them it runs on `fallback`, stated for a person), none of which is fatal."""

    detector: str
    required: tuple[str, ...]
    wanted: tuple[str, ...]
    fallback: str


NEEDS = (
    Need("gpu_lost", ("DCGM_FI_DEV_FB_USED",), (), ""),
    Need("gpu_xid", ("DCGM_FI_DEV_XID_ERRORS",), (), ""),
    Need(
        "gpu_memory",
        (),
        (
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
            "DCGM_FI_DEV_RETIRED_DBE",
            "DCGM_FI_DEV_RETIRED_SBE",
            "DCGM_FI_DEV_RETIRED_PENDING",
        ),
        "row remapping only (UNCORRECTABLE_REMAPPED_ROWS, ROW_REMAP_FAILURE); double-bit errors "
        "still reach gpu_xid as XID 48, SBE storms and retired pages are not seen",
    ),
    Need(
        "gpu_throttle",
        (),
        ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",),
        "SM clock 20 % below busy GPUs of the same model, with GPU temperature and power draw "
        "for the cause; no power-brake or HW-slowdown bit, so the reason is inferred",
    ),
    Need(
        "gpu_interconnect",
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER",),
        ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",),
        "PCIe replays only: NVLink CRC error storms are invisible",
    ),
    Need(
        "straggler",
        ("DCGM_FI_DEV_GPU_UTIL",),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
        "GPU utilisation, SM clock and power across ranks (and training_steps_total where "
        "exported); a rank that is busy but slow inside the SM is harder to tell apart",
    ),
    Need("nccl_hang", ("DCGM_FI_DEV_GPU_UTIL",), ("DCGM_FI_DEV_POWER_USAGE",), "utilisation only"),
    Need("gpu_idle", ("DCGM_FI_DEV_GPU_UTIL",), ("DCGM_FI_DEV_FB_USED",), "utilisation only"),
)
"""Per detector, the fields its evidence comes from (detectors/*.py say why)."""


@dataclass(frozen=True, slots=True)
class DetectorCoverage:
    detector: str
    status: str
    """`full`, `reduced` (runs on `fallback`) or `blind` (a required field is missing)."""
    missing: tuple[str, ...]
    fallback: str


@dataclass(frozen=True, slots=True)
class FieldCoverage:
    present: tuple[str, ...]
    missing: tuple[str, ...]
    """Fields some detector reads that no series carries."""
    detectors: tuple[DetectorCoverage, ...]
    exporter_lines: tuple[str, ...]
    """CSV lines that turn the missing fields on."""

    def lines(self) -> list[str]:
        """The report for people: one line per detector not on full evidence, then the CSV."""
        out = [f"fields: {len(self.present)} present, {len(self.missing)} wanted but missing"]
        for d in self.detectors:
            if d.status == "blind":
                out.append(f"  {d.detector}: CANNOT RUN, missing {', '.join(d.missing)}")
            elif d.status == "reduced":
                out.append(f"  {d.detector}: reduced evidence ({d.fallback})")
        if self.exporter_lines:
            out.append("  add to dcgm-exporter's counters CSV to turn them on:")
            out += [f"    {line}" for line in self.exporter_lines]
        return out


def field_coverage(present: Collection[str]) -> FieldCoverage:
    """Coverage of the detectors' evidence by the `present` field names (DCGM family names as
    the collector saw them: the `families` answer, or the names on scraped pages)."""
    have = {canonical_name(n) for n in present}
    detectors: list[DetectorCoverage] = []
    missing: dict[str, None] = {}
    for need in NEEDS:
        lacks_required = tuple(f for f in need.required if f not in have)
        lacks_wanted = tuple(f for f in need.wanted if f not in have)
        for f in (*lacks_required, *lacks_wanted):
            missing[f] = None
        if lacks_required:
            detectors.append(DetectorCoverage(need.detector, "blind", lacks_required, ""))
        elif lacks_wanted:
            detectors.append(
                DetectorCoverage(need.detector, "reduced", lacks_wanted, need.fallback)
            )
        else:
            detectors.append(DetectorCoverage(need.detector, "full", (), ""))
    lines = tuple(EXPORTER_CSV_LINES[f] for f in missing if f in EXPORTER_CSV_LINES)
    return FieldCoverage(tuple(sorted(have)), tuple(missing), tuple(detectors), lines)


def snapshot_coverage(snapshot: FleetSnapshot) -> FieldCoverage:
    """`field_coverage` of the fields with a value on any GPU of `snapshot`."""
    return field_coverage(
        [name for name, col in snapshot.metrics.items() if bool(np.any(col.present()))]
    )


__all__ = [
    "EXPORTER_CSV_LINES",
    "NEEDS",
    "SHIPPED_DEFAULT_FIELDS",
    "DetectorCoverage",
    "FieldCoverage",
    "Need",
    "field_coverage",
    "snapshot_coverage",
]
