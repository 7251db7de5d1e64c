"""Per-model baselines (A100, H100, H200): simulated GPUs draw, clock and heat like real ones.

Numbers are public datasheet values for the SXM parts (TDP, boost clock, HBM clock, memory size)
plus typical field observations (idle draw, temperatures, all-reduce NVLink traffic). The engine
turns activity levels into physical units with these, so a detector tuned on the simulator meets
plausible magnitudes in production.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from observer.fleet.model import FloatArray


@dataclass(frozen=True, slots=True)
class GpuBaseline:
    model: str
    idle_power_w: float
    max_power_w: float
    """TDP of the SXM part: what a saturated training step draws at most."""
    sm_clock_idle_mhz: float
    sm_clock_max_mhz: float
    mem_clock_mhz: float
    """HBM clock; fixed whatever the load."""
    gpu_temp_idle_c: float
    gpu_temp_load_c: float
    mem_temp_idle_c: float
    mem_temp_load_c: float
    fb_total_mib: float
    fb_reserved_mib: float
    """DCGM_FI_DEV_FB_RESERVED: driver-reserved; FB_FREE = total - used - reserved."""
    nvlink_allreduce_bytes_per_s: float
    """NVLink bytes/s (all links, both directions) one GPU moves during ring all-reduce."""
    pcie_replays_per_s: float
    """Background PCIe replay rate of a healthy GPU (well under the BER ceiling)."""


BASELINES: dict[str, GpuBaseline] = {
    # A100-SXM4-80GB: 400 W TDP, 1410 MHz boost, HBM2e 1593 MHz, NVLink 3 (600 GB/s).
    "A100": GpuBaseline(
        model="A100",
        idle_power_w=58.0,
        max_power_w=400.0,
        sm_clock_idle_mhz=210.0,
        sm_clock_max_mhz=1410.0,
        mem_clock_mhz=1593.0,
        gpu_temp_idle_c=31.0,
        gpu_temp_load_c=64.0,
        mem_temp_idle_c=35.0,
        mem_temp_load_c=72.0,
        fb_total_mib=81920.0,
        fb_reserved_mib=566.0,
        nvlink_allreduce_bytes_per_s=180e9,
        pcie_replays_per_s=0.0005,
    ),
    # H100 SXM5 80GB: 700 W TDP, 1980 MHz boost, HBM3 2619 MHz, NVLink 4 (900 GB/s).
    "H100": GpuBaseline(
        model="H100",
        idle_power_w=72.0,
        max_power_w=700.0,
        sm_clock_idle_mhz=345.0,
        sm_clock_max_mhz=1980.0,
        mem_clock_mhz=2619.0,
        gpu_temp_idle_c=30.0,
        gpu_temp_load_c=67.0,
        mem_temp_idle_c=34.0,
        mem_temp_load_c=76.0,
        fb_total_mib=81559.0,
        fb_reserved_mib=579.0,
        nvlink_allreduce_bytes_per_s=320e9,
        pcie_replays_per_s=0.0005,
    ),
    # H200 SXM 141GB: 700 W TDP, 1980 MHz boost, HBM3e 3201 MHz, NVLink 4 (900 GB/s).
    "H200": GpuBaseline(
        model="H200",
        idle_power_w=76.0,
        max_power_w=700.0,
        sm_clock_idle_mhz=345.0,
        sm_clock_max_mhz=1980.0,
        mem_clock_mhz=3201.0,
        gpu_temp_idle_c=30.0,
        gpu_temp_load_c=66.0,
        mem_temp_idle_c=34.0,
        mem_temp_load_c=74.0,
        fb_total_mib=143771.0,
        fb_reserved_mib=637.0,
        nvlink_allreduce_bytes_per_s=340e9,
        pcie_replays_per_s=0.0005,
    ),
}


@dataclass(frozen=True, slots=True)
class BaselineColumns:
    """The baselines spread over GPUs: one float64 column per field, indexed by GPU position."""

    idle_power_w: FloatArray
    max_power_w: FloatArray
    sm_clock_idle_mhz: FloatArray
    sm_clock_max_mhz: FloatArray
    mem_clock_mhz: FloatArray
    gpu_temp_idle_c: FloatArray
    gpu_temp_load_c: FloatArray
    mem_temp_idle_c: FloatArray
    mem_temp_load_c: FloatArray
    fb_total_mib: FloatArray
    fb_reserved_mib: FloatArray
    nvlink_allreduce_bytes_per_s: FloatArray
    pcie_replays_per_s: FloatArray


def baseline_columns(models: list[str] | tuple[str, ...]) -> BaselineColumns:
    """Columns for GPUs whose short model names ("A100", ...) are given in GPU order."""
    names = sorted(set(models))
    index = {m: i for i, m in enumerate(names)}
    rows = np.fromiter((index[m] for m in models), dtype=np.int32, count=len(models))
    cols: dict[str, FloatArray] = {}
    for f in fields(BaselineColumns):
        values = [float(getattr(BASELINES[m], f.name)) for m in names]
        cols[f.name] = np.array(values, dtype=np.float64)[rows]
    return BaselineColumns(**cols)
