"""Cumulative DCGM counters and training steps as closed-form functions of time.

A counter here is never stepped: it is a per-GPU constant (what the GPU had accumulated before
the scenario) plus integrals of piecewise-constant rates over each pod's life and each fault's
window. That keeps every counter monotone in t and lets any time be sampled in any order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from observer.fleet.model import FloatArray
from simulator.gpu_models import BaselineColumns
from simulator.layout import SimPod
from simulator.scenario import FaultKind, Workload, WorkloadKind
from simulator.targets import ResolvedFault
from simulator.timeline import JobTimeline, inference_load, inference_load_integral

FAULT_XID: dict[FaultKind, int] = {
    FaultKind.XID48_DBE: 48,
    FaultKind.ROW_REMAP_FAILURE: 64,
}
"""XIDs the exporter reports for a fault (XID 79 is never reported: the GPU is gone)."""
NVLINK_CRC_STORM_PER_S = 500.0
"""Per unit of severity; DCGM's health limit is 100/s."""
PCIE_REPLAY_STORM_PER_S = 25.0
"""Per unit of severity; the healthy ceiling is ~0.96/min per lane (~0.26/s at x16)."""
NVLINK_COLLAPSE = 0.9
"""NVLink bandwidth collapse at severity 1: the GPU's link traffic falls by 90 % (no CRC)."""
I64 = npt.NDArray[np.int64]
MIB = float(1 << 20)
"""DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL (field 449) is the links' current throughput in MiB/s,
not a byte count (dcgm-exporter #472, PR #658)."""
INFERENCE_NVLINK_SHARE = 0.05
"""Tensor-parallel serving moves a small share of the training all-reduce traffic."""


@dataclass(frozen=True, slots=True)
class StaticCounters:
    """What each GPU had counted before the scenario started (drawn once from the seed)."""

    sbe: FloatArray
    correctable_rows: FloatArray
    pcie_replay: FloatArray
    pcie_rate: FloatArray
    nvlink_bytes: FloatArray
    """Drawn so that the seed's later draws keep their values; field 449 is a rate, no total."""
    nvlink_rate: FloatArray
    """All-reduce bytes/s for this GPU (model baseline with a per-GPU spread)."""

    @staticmethod
    def draw(rng: np.random.Generator, base: BaselineColumns) -> StaticCounters:
        n = base.max_power_w.shape[0]
        sbe = np.where(rng.random(n) < 0.05, rng.integers(1, 20, n), 0).astype(np.float64)
        rows = np.where(rng.random(n) < 0.08, rng.integers(1, 5, n), 0).astype(np.float64)
        replay = np.asarray(rng.integers(0, 4, n), dtype=np.float64)
        rate = base.pcie_replays_per_s * rng.lognormal(0.0, 0.5, n)
        nvl = np.floor(rng.uniform(0.0, 5e14, n))
        nvl_rate = base.nvlink_allreduce_bytes_per_s * rng.uniform(0.95, 1.05, n)
        return StaticCounters(sbe, rows, replay, rate, nvl, nvl_rate)


@dataclass(frozen=True, slots=True)
class CounterContext:
    start: float
    workloads: tuple[Workload, ...]
    timelines: tuple[JobTimeline | None, ...]
    diurnal_phase: FloatArray
    static: StaticCounters
    faults: tuple[ResolvedFault, ...]
    n_gpu: int
    reset_at: Mapping[int, float] = field(default_factory=dict)
    """GPU position -> unix time of its latest reset or reboot: the volatile ECC counters
    (`*_VOL_TOTAL`, counted since the driver last initialised the GPU) start again from zero;
    remapped rows and retired pages persist."""


@dataclass(frozen=True, slots=True)
class Counters:
    metrics: dict[str, FloatArray]
    pod_steps: FloatArray
    """Per pod (all pods passed in, active or not): steps so far, NaN where not exported."""


def _traffic(
    ctx: CounterContext,
    t: float,
    pods: Sequence[SimPod],
    flat_gpu: I64,
    flat_pod: I64,
    p_start: FloatArray,
    p_end: FloatArray,
    p_job: I64,
) -> tuple[FloatArray, FloatArray]:
    """(per-GPU NVLink traffic integral, per-pod steps) from the scenario start to `t`."""
    a = p_start
    b = np.minimum(p_end, t)
    nvl_pod = np.zeros(len(pods))
    steps = np.full(len(pods), np.nan)
    for j, w in enumerate(ctx.workloads):
        m = p_job == j
        if not m.any():
            continue
        tl = ctx.timelines[j]
        if tl is not None:
            nvl_pod[m] = tl.nvlink_integral(a[m], b[m])
            if w.steps_metric:
                steps[m] = np.floor(tl.step_integral(a[m], b[m]) / w.step_time)
        elif w.kind == WorkloadKind.INFERENCE and w.gpus_per_pod > 1:
            ph = float(ctx.diurnal_phase[j])
            nvl_pod[m] = INFERENCE_NVLINK_SHARE * inference_load_integral(w.load, a[m], b[m], ph)
    per_gpu = np.bincount(flat_gpu, weights=nvl_pod[flat_pod], minlength=ctx.n_gpu)[: ctx.n_gpu]
    nvl: FloatArray = per_gpu.astype(np.float64)
    return nvl, steps


def _nvlink_rate(
    ctx: CounterContext,
    t: float,
    flat_gpu: I64,
    flat_pod: I64,
    p_start: FloatArray,
    p_end: FloatArray,
    p_job: I64,
) -> FloatArray:
    """Per GPU: its NVLink throughput at `t` in bytes/s (the derivative of `_traffic`, with each
    bandwidth collapse taken off its GPU)."""
    active = (p_start <= t) & (t < p_end)
    share = np.zeros(p_start.shape[0])
    for j, w in enumerate(ctx.workloads):
        m = active & (p_job == j)
        if not m.any():
            continue
        tl = ctx.timelines[j]
        if tl is not None:
            share[m] = tl.nvlink_factor_at(t)
        elif w.kind == WorkloadKind.INFERENCE and w.gpus_per_pod > 1:
            load = float(inference_load(w.load, t, float(ctx.diurnal_phase[j])))
            share[m] = INFERENCE_NVLINK_SHARE * load
    per_gpu = np.bincount(flat_gpu, weights=share[flat_pod], minlength=ctx.n_gpu)[: ctx.n_gpu]
    for f in ctx.faults:
        if f.kind == FaultKind.NVLINK_BW_COLLAPSE and f.start < t <= f.end and f.gpu >= 0:
            per_gpu[f.gpu] *= 1.0 - NVLINK_COLLAPSE * min(f.severity, 1.0 / NVLINK_COLLAPSE)
    out: FloatArray = per_gpu * ctx.static.nvlink_rate
    return out


def fleet_counters(
    ctx: CounterContext,
    t: float,
    pods: Sequence[SimPod],
    flat_gpu: I64,
    flat_pod: I64,
    p_start: FloatArray,
    p_end: FloatArray,
    p_job: I64,
) -> Counters:
    n, st = ctx.n_gpu, ctx.static
    _, steps = _traffic(ctx, t, pods, flat_gpu, flat_pod, p_start, p_end, p_job)
    rate = _nvlink_rate(ctx, t, flat_gpu, flat_pod, p_start, p_end, p_job)
    nvlink_mib_s = np.round(rate / MIB)
    elapsed = max(0.0, t - ctx.start)
    dbe = np.zeros(n)
    unc_rows = np.zeros(n)
    crc = np.zeros(n)
    sbe = st.sbe.copy()
    replay = st.pcie_replay + np.floor(st.pcie_rate * elapsed)
    for f in ctx.faults:
        if t < f.start or f.gpu < 0:
            continue
        el = min(t, f.end) - f.start
        sev = f.severity
        g = f.gpu
        volatile = not f.start <= ctx.reset_at.get(g, -math.inf) <= t
        if f.kind == FaultKind.XID48_DBE:
            if volatile:
                dbe[g] += max(1, round(sev)) + math.floor(el * sev / 600.0)
                sbe[g] += round(20 * sev)
            unc_rows[g] += 1 + math.floor(el * sev / 1200.0)
        elif f.kind == FaultKind.ROW_REMAP_FAILURE:
            dbe[g] += 1 if volatile else 0
            unc_rows[g] += 4 * math.ceil(sev) + math.floor(el * sev / 300.0)
        elif f.kind == FaultKind.NVLINK_CRC_STORM:
            crc[g] += math.floor(el * NVLINK_CRC_STORM_PER_S * sev)
        elif f.kind == FaultKind.PCIE_REPLAY_STORM:
            replay[g] += math.floor(el * PCIE_REPLAY_STORM_PER_S * sev)
    for g, at in ctx.reset_at.items():
        if at <= t:
            sbe[g] -= st.sbe[g]  # counted before the reset: gone with the driver's state
    metrics = {
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": dbe,
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": sbe,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": unc_rows,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": st.correctable_rows.copy(),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": replay,
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": crc,
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": nvlink_mib_s,
    }
    return Counters(metrics, steps)
