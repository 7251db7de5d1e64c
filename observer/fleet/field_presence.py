"""Field presence: which DCGM fields a fleet reports, and the dcgm-exporter lines for the rest.

dcgm-exporter's shipped field list (etc/default-counters.csv in NVIDIA/dcgm-exporter) leaves the
ECC counters, the retired-page counters, the NVLink error counters and the `*_VIOLATION`
throttle counters commented out, and has no clock-event (throttle) reasons field at all. This
module knows fields only: which of a wanted set are present in a snapshot (or a plain set of
series names) and which counters-CSV line turns each missing one on. What a missing field costs
each detector is `detectors.coverage`'s business; `gpufleet collect --summary` and the service
put the two together.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from observer.fleet.catalog import BY_NAME, METRICS, XID_COUNT_METRIC, Kind, canonical_name
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
retired pages, NVLink CRC/replay/recovery counters, the *_VIOLATION throttle counters and
DCGM_EXP_XID_ERRORS_COUNT are commented out, and the clock-event (throttle) reasons field is
not listed."""

_RETIRED = "Total number of retired pages due to"
_OFF_CATALOG: dict[str, tuple[Kind, str]] = {
    "DCGM_FI_DEV_RETIRED_SBE": (Kind.COUNTER, f"{_RETIRED} single-bit errors."),
    "DCGM_FI_DEV_RETIRED_DBE": (Kind.COUNTER, f"{_RETIRED} double-bit errors."),
    "DCGM_FI_DEV_RETIRED_PENDING": (Kind.COUNTER, "Total number of pages pending retirement."),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": (Kind.GAUGE, "Whether remapping of rows is pending."),
    XID_COUNT_METRIC: (
        Kind.GAUGE,
        "Count of XID Errors within user-specified time window (see xid-count-window-size param).",
    ),
}  # fmt: skip
"""Fields some detector reads that the catalog does not list (pre-Ampere retired pages, the
pending-remap flag, dcgm-exporter's own XID counter): their kind and help as the shipped CSV
has them, commented out."""


def exporter_line(field: str) -> str:
    """The counters-CSV line (`name, type, help`) that turns `field` on: for the ECC,
    retired-page and NVLink counters it is the commented-out line of the shipped file,
    uncommented. The file is dcgm-exporter's `-f`/`DCGM_EXPORTER_COLLECTORS`, or the GPU
    operator's `dcgmExporter.config`; on drivers that name the reasons field
    DCGM_FI_DEV_CLOCKS_EVENT_REASONS, use that name instead."""
    spec = BY_NAME.get(field)
    if spec is not None:
        return f"{field}, {spec.exposed_kind.value}, {spec.help}"
    kind, text = _OFF_CATALOG.get(
        field, (Kind.GAUGE, field.removeprefix("DCGM_FI_DEV_").replace("_", " ").lower() + ".")
    )
    return f"{field}, {kind.value}, {text}"


CATALOG_FIELDS: tuple[str, ...] = tuple(m.name for m in METRICS)


@dataclass(frozen=True, slots=True)
class FieldPresence:
    present: tuple[str, ...]
    """Wanted fields some series carries (catalog names: aliases folded)."""
    missing: tuple[str, ...]
    """Wanted fields no series carries, in the order asked for."""
    exporter_lines: tuple[str, ...]
    """Counters-CSV lines that turn the missing fields on."""

    def lines(self) -> list[str]:
        """For people: the counts, then the CSV lines to add."""
        out = [f"fields: {len(self.present)} present, {len(self.missing)} missing"]
        if self.exporter_lines:
            out.append("  add to dcgm-exporter's counters CSV to turn the missing ones on:")
            out += [f"    {line}" for line in self.exporter_lines]
        return out


def field_presence(present: Iterable[str], wanted: Iterable[str] = CATALOG_FIELDS) -> FieldPresence:
    """Which `wanted` fields (the catalog unless named) are among the `present` series names
    (DCGM family names as the collector saw them; aliases fold to catalog names)."""
    have = {canonical_name(n) for n in present}
    want = tuple(dict.fromkeys(canonical_name(w) for w in wanted))
    missing = tuple(w for w in want if w not in have)
    return FieldPresence(
        tuple(sorted(w for w in want if w in have)),
        missing,
        tuple(exporter_line(f) for f in missing),
    )


def snapshot_fields(snapshot: FleetSnapshot) -> frozenset[str]:
    """The fields with a value on any GPU of `snapshot` (catalog names)."""
    return frozenset(
        canonical_name(name)
        for name, col in snapshot.metrics.items()
        if bool(np.any(col.present()))
    )


__all__ = [
    "CATALOG_FIELDS",
    "SHIPPED_DEFAULT_FIELDS",
    "FieldPresence",
    "exporter_line",
    "field_presence",
    "snapshot_fields",
]
