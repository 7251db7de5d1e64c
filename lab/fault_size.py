"""A fault's physical size, and whether it is above the limit its detector publishes.

Detection rate is only meaningful as a function of how large a fault is: a straggler 5 % slower
is below the straggler detector's 7 % limit by design, one 25 % slower far above it. The size is
read from the truth entry's severity through the simulator's own scale (timeline, counters), and
the limit from the detector's default parameters, so neither side can drift from the other.
Thermal and power-brake faults are sized by how long the episode lasts where the clock-event
reasons field is collected (gpu_throttle needs the bits to hold `min_seconds`), and by how far the
SM clock falls below its busy peers where it is not (the detector's clock fallback, `clock_drop`).
Kinds without a size scale (XIDs, lost GPUs, hangs) are always above the limit;
faults no rule names (frame-buffer leak, clock drift, ...) never are: no detector publishes one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from detectors import gpu_interconnect, gpu_throttle, straggler
from simulator.counters import NVLINK_CRC_STORM_PER_S, PCIE_REPLAY_STORM_PER_S
from simulator.gpu_models import BASELINES
from simulator.levels import throttle_clock_factor
from simulator.scenario import NOVEL_FAULTS
from simulator.timeline import STRAGGLER_SLOWDOWN


@dataclass(frozen=True, slots=True)
class FaultSize:
    value: float | None
    """Physical size in `unit` (None: the kind has no size scale)."""
    unit: str
    limit: float | None
    """The detector's published limit in the same unit (None: none)."""
    covered: bool = True
    """False for faults no rule detector names (only the anomaly detector may see them)."""

    @property
    def above_limit(self) -> bool:
        if not self.covered:
            return False
        return self.value is None or self.limit is None or self.value >= self.limit


NOVEL_KINDS = frozenset(k.value for k in NOVEL_FAULTS)
STRAGGLER_LIMIT_PCT = round(100.0 * straggler.Params().min_gap, 6)  # 7.000000000000001 otherwise
NVLINK_LIMIT_PER_S = gpu_interconnect.Params().nvlink_crc_per_second
PCIE_LIMIT_PER_MIN = gpu_interconnect.Params().pcie_replays_per_minute
THROTTLE_LIMIT_S = gpu_throttle.Params().min_seconds
THROTTLE_CLOCK_LIMIT_PCT = round(100.0 * gpu_throttle.Params().clock_drop, 6)
BRAKE_CLOCK_LIMIT_PCT = round(100.0 * gpu_throttle.Params().brake_drop, 6)
"""Without reason bits a cool GPU's slow clock is a power brake only from this cut on (a
software power cap looks the same below it); a hot one is thermal from `clock_drop`."""
THROTTLE_KINDS = frozenset({"thermal_throttle", "power_brake"})


def throttle_clock_drop_pct(kind: str, severity: float, model: str | None) -> float:
    """How far (% of its busy peers' clock) a fully busy GPU's SM clock falls under a thermal
    or power-brake fault of `severity`: the simulator's scale on the model's idle-to-boost span."""
    b = BASELINES.get(model or "", BASELINES["H100"])
    span = b.sm_clock_max_mhz - b.sm_clock_idle_mhz
    return 100.0 * (1.0 - throttle_clock_factor(kind, severity)) * span / b.sm_clock_max_mhz


def fault_size(
    fault: Mapping[str, Any], scrape_interval: float = 30.0, clock_reasons: bool = True
) -> FaultSize:
    """Size of one truth fault entry (simulator.truth) and its detector's limit.

    `clock_reasons`: whether the scenario's exporter collects the clock-event reasons field
    (truth `clock_reasons_collected`), which decides how gpu_throttle can see a throttle."""
    del scrape_interval  # kept for limits that depend on the scrape interval
    sev = float(fault.get("severity", 1.0))
    kind = fault["kind"]
    if kind in THROTTLE_KINDS and clock_reasons:
        seconds = round(float(fault["end"]) - float(fault["start"]), 1)
        return FaultSize(seconds, "s episode", THROTTLE_LIMIT_S)
    if kind in THROTTLE_KINDS:
        drop = round(throttle_clock_drop_pct(kind, sev, fault.get("model")), 1)
        hot = kind == "thermal_throttle"
        return FaultSize(
            drop, "% clock drop", THROTTLE_CLOCK_LIMIT_PCT if hot else BRAKE_CLOCK_LIMIT_PCT
        )
    if kind == "straggler":
        slower = round(100.0 * STRAGGLER_SLOWDOWN * sev, 2)
        return FaultSize(slower, "% slower", STRAGGLER_LIMIT_PCT)
    if kind == "nvlink_crc_storm":
        return FaultSize(round(NVLINK_CRC_STORM_PER_S * sev, 2), "CRC/s", NVLINK_LIMIT_PER_S)
    if kind == "pcie_replay_storm":
        per_min = round(60.0 * PCIE_REPLAY_STORM_PER_S * sev, 2)
        return FaultSize(per_min, "replays/min", PCIE_LIMIT_PER_MIN)
    if kind in NOVEL_KINDS:
        return FaultSize(sev, "severity", None, covered=False)
    return FaultSize(None, "", None)
