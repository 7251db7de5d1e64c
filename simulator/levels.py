"""Activity levels: what each phase or workload does to a GPU, and what gauge faults change.

Levels are unit-free (0..1) per GPU; the engine turns them into watts, MHz and degrees with the
model baselines. Keeping the numbers in one table makes "what does a checkpoint look like" a
one-line answer and keeps the engine free of magic constants.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from observer.fleet.model import FloatArray, IntArray
from simulator.timeline import Phase

# Columns of a level row.
UTIL, GR, TENSOR, DRAM, POWER, CLOCK, FB = range(7)
N_LEVELS = 7
SPIN_GR = 0.97
"""Graphics-engine activity of a GPU whose only resident kernel is an NCCL spin-wait."""
RANK0_EXTRA = 0.025
"""Rank 0 does a little more than its peers (logging, metric reduction): +2.5 % tensor and
graphics activity, normal and not a fault."""
LAST_STAGE_EXTRA = 0.04
"""The last pipeline stage (last rank of a job with >= 4 GPUs per pod) computes the loss and
the output layer: +4 % tensor activity on all its GPUs, normal and not a fault."""

PHASE_LEVELS: dict[Phase, tuple[float, ...]] = {
    #                 util   gr    tensor dram  power clock fb
    Phase.TRAIN: (0.98, 0.92, 0.62, 0.55, 0.88, 1.00, 1.0),
    Phase.EVAL: (0.62, 0.55, 0.30, 0.35, 0.45, 1.00, 1.0),
    Phase.CHECKPOINT: (0.06, 0.03, 0.005, 0.04, 0.06, 0.55, 1.0),
    Phase.HANG: (0.995, SPIN_GR, 0.002, 0.01, 0.10, 1.00, 1.0),
}
"""Training phases; `fb` multiplies the job's framebuffer share. A hung job's ranks sit in a
resident NCCL spin kernel: the graphics engine reads busy (~0.97, as on real hardware: the
engine counts a resident kernel's cycles, not useful math), the tensor pipe and DRAM idle, and
power stays a little above idle (the spin loop polls memory)."""
IDLE_POD_LEVELS = (0.0, 0.0, 0.0, 0.0, 0.02, 0.0, 0.0)
"""Allocated but unused: a CUDA context, nothing running (fb set separately)."""
IDLE_POD_FB_MIB = 520.0
UNALLOCATED_LEVELS = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def inference_levels(load: float, fb_share: float) -> tuple[float, ...]:
    """Serving at `load` (0..1): util tracks load, the KV cache keeps memory preallocated."""
    busy = 1.0 if load > 0.02 else 0.0
    return (
        min(1.0, load * 1.1),
        0.85 * load,
        0.45 * load,
        0.5 * load,
        0.08 + 0.75 * load,
        busy,
        fb_share,
    )


@dataclass(slots=True)
class GaugeState:
    """Per-GPU working arrays the engine fills, faults edit, and units are derived from."""

    levels: FloatArray
    """(n_gpu, N_LEVELS)."""
    gpu_temp_add: FloatArray
    mem_temp_add: FloatArray
    temp_floor: FloatArray
    """Thermal fault: the GPU temperature does not drop below this (NaN: no floor)."""
    clock_bits: IntArray
    xid: FloatArray
    row_remap_failure: FloatArray


def apply_straggler(
    state: GaugeState, gpu: int, gpu_job: npt.NDArray[np.int64], slowdown: float, training: bool
) -> None:
    """Peers of a slow GPU wait at each all-reduce inside an NCCL spin kernel.

    Waiting is not idling: the spin kernel stays resident, so the peers' utilisation stays up
    and their graphics engine reads busy (the waiting share of each step at `SPIN_GR`); only
    their tensor pipe and DRAM traffic drop by the waiting share, and power with them (a spin
    loop draws far less than math). The slow GPU itself stays at full activity."""
    job = int(gpu_job[gpu])
    if job < 0 or not training:
        return
    peers = np.flatnonzero(gpu_job == job)
    peers = peers[peers != gpu]
    wait = 1.0 / (1.0 + slowdown)
    for col in (TENSOR, DRAM):
        state.levels[peers, col] *= wait
    gr = state.levels[peers, GR]
    state.levels[peers, GR] = gr * wait + np.maximum(gr, SPIN_GR) * (1.0 - wait)
    state.levels[peers, POWER] *= 0.5 + 0.5 * wait


def throttle_clock_factor(kind: str, severity: float) -> float:
    """What a thermal or power-brake fault of `severity` leaves of a busy GPU's clock level
    (share of the idle-to-boost span; 1.0: no cut). One scale for the engine and for the
    eval's fault sizes (lab.fault_size), so the two cannot drift apart."""
    sev = min(max(severity, 0.0), 2.0)
    if kind == "thermal_throttle":
        return 1.0 - 0.3 * sev
    if kind == "power_brake":
        return 1.0 if sev <= 0.0 else min(1.0, 0.3 / sev)
    raise ValueError(f"no clock scale for fault kind {kind!r}")


def apply_thermal(state: GaugeState, gpu: int, severity: float) -> None:
    """SW/HW thermal slowdown: hot GPU, clocks cut, power follows the clock."""
    sev = min(severity, 2.0)
    state.temp_floor[gpu] = 84.0 + 5.0 * sev
    state.mem_temp_add[gpu] += 12.0 * sev
    state.levels[gpu, CLOCK] *= throttle_clock_factor("thermal_throttle", severity)
    state.levels[gpu, POWER] *= 1.0 - 0.2 * sev
    bits = 0x20 | (0x40 if severity >= 1.0 else 0)
    state.clock_bits[gpu] |= bits


FB_LEAK_MIB_PER_S = 1024.0 / 600.0
"""Frame-buffer leak at severity 1: 1 GiB per 10 minutes."""
CLOCK_DRIFT_PER_HOUR = 0.08
"""Clock drift at severity 1: the clock under load loses 8 % of its span per hour."""
CLOCK_DRIFT_MAX = 0.4
COOLING_C_AT_TDP = 12.0
"""Cooling degradation at severity 1: +12 C at full power, proportionally less below it."""


def apply_novel(
    state: GaugeState, gpu: int, kind: str, severity: float, elapsed: float, fb_cap_mib: float
) -> None:
    """Faults no rule names (no XID, counter or clock-event bit): a frame-buffer leak, a clock
    that drifts down over hours, cooling that degrades (hotter at the same power)."""
    if kind == "fb_leak":
        grown = FB_LEAK_MIB_PER_S * severity * elapsed / fb_cap_mib
        state.levels[gpu, FB] = min(0.99, state.levels[gpu, FB] + grown)
    elif kind == "clock_drift":
        lost = min(CLOCK_DRIFT_MAX, CLOCK_DRIFT_PER_HOUR * severity * elapsed / 3600.0)
        state.levels[gpu, CLOCK] *= 1.0 - lost
    elif kind == "cooling_degradation":
        ramp = min(1.0, elapsed / 600.0)  # a fan slows over minutes, not at once
        state.gpu_temp_add[gpu] += COOLING_C_AT_TDP * severity * ramp * state.levels[gpu, POWER]


def apply_power_cap(state: GaugeState, gpus: npt.NDArray[np.int64], cap: FloatArray) -> None:
    """Software power capping (an operator's `nvidia-smi -pl`, a facility power budget): the
    driver holds power at the cap by lowering clocks, and reports SW_POWER_CAP (0x4), a normal
    clock-event reason. Not a hardware fault: nothing may page on it."""
    over = state.levels[gpus, POWER] > cap
    sel = gpus[over]
    state.clock_bits[gpus] |= 0x4
    if sel.size == 0:
        return
    ratio = cap[over] / state.levels[sel, POWER]
    state.levels[sel, POWER] = cap[over]
    # Dynamic power scales roughly with f * V^2 ~ f^2 near the top of the curve.
    state.levels[sel, CLOCK] *= np.sqrt(ratio)


def apply_power_brake(state: GaugeState, gpu: int, severity: float) -> None:
    """HW power brake (external signal): clocks slammed down, power far below load."""
    sev = min(severity, 2.0)
    cut = throttle_clock_factor("power_brake", severity)
    state.levels[gpu, CLOCK] = min(float(state.levels[gpu, CLOCK]), cut)
    # A brake never raises power: a mild one (severity < 0.35) only caps the clock it leaves.
    state.levels[gpu, POWER] *= min(1.0, 0.35 / sev)
    state.clock_bits[gpu] |= 0x80
