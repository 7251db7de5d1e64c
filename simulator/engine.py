"""The metric engine: a scenario and a time in, every GPU's DCGM fields out, as numpy columns.

`FleetSimulator.sample(t, pods)` is a pure function of (scenario, t, pods): gauges get noise from
a generator seeded by (seed, scrape step), counters are closed-form integrals of piecewise
constant rates, so any time can be sampled in any order, serve mode agrees with the OpenMetrics
backfill, and 100k GPUs cost a few array operations rather than a loop.

What vanishes when (as dcgm-exporter behaves): a GPU that fell off the bus (XID 79) is no longer
enumerated, so all its series disappear from the fault start until the fault ends (the XID
itself is only in the kernel log, never in the exporter's gauge); a node whose exporter is down
has no DCGM series and `up == 0`; a fleet-wide scrape gap has no samples at all.
`DCGM_EXP_XID_ERRORS_COUNT{xid}` is, as in dcgm-exporter, a gauge counting XIDs within the last
`XID_COUNT_WINDOW` seconds. The XID gauge follows the scenario's exporter layout
(simulator.xid_log): real layouts hold the last XID until the exporter restarts (its
`exporter_down` ends, the node reboots); the `simple` one holds the code until the fault ends.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from observer.fleet.model import BoolArray, FloatArray, IntArray
from simulator import counters
from simulator.counters import I64
from simulator.gpu_models import baseline_columns
from simulator.layout import Layout, SimPod, build_layout
from simulator.levels import (
    CLOCK,
    DRAM,
    FB,
    GR,
    IDLE_POD_FB_MIB,
    IDLE_POD_LEVELS,
    LAST_STAGE_EXTRA,
    N_LEVELS,
    PHASE_LEVELS,
    POWER,
    RANK0_EXTRA,
    TENSOR,
    UNALLOCATED_LEVELS,
    UTIL,
    GaugeState,
    apply_novel,
    apply_power_brake,
    apply_power_cap,
    apply_straggler,
    apply_thermal,
    inference_levels,
)
from simulator.scenario import NOVEL_FAULTS, FaultKind, Scenario, WorkloadKind
from simulator.targets import resolve_confounders, resolve_faults
from simulator.timeline import (
    STRAGGLER_SLOWDOWN,
    JobTimeline,
    Phase,
    inference_load,
    job_intervals,
)
from simulator.xid_log import XidLog

XID_COUNT_WINDOW = 300.0
"""dcgm-exporter's default --xid-count-window-size (5 minutes)."""


@dataclass(frozen=True, slots=True)
class Sample:
    """The fleet at `t`: DCGM columns over GPUs (layout order), pods, exporters."""

    t: float
    metrics: Mapping[str, FloatArray]
    """Catalog name -> float64 over GPUs; NaN where the series is absent."""
    present: BoolArray
    """Per GPU: its DCGM series exist at `t`."""
    gpu_pod: IntArray
    """Per GPU: index into `pods` of the active pod holding it, or -1."""
    pods: tuple[SimPod, ...]
    pod_steps: FloatArray
    """Per pod: `training_steps_total`, NaN where the pod does not export it (or is inactive)."""
    exporter_up: BoolArray
    """Per node (layout order): the node's dcgm-exporter answers (`up == 1` unless a scrape gap)."""
    scrape_ok: bool
    """False during a fleet-wide scrape gap: nothing at all is scraped at `t`."""
    xid_counts: Mapping[int, FloatArray]
    """XID -> per-GPU count within the last XID_COUNT_WINDOW s (0 none, NaN absent)."""


def _seed(value: int) -> int:
    return value % (1 << 63)


class _Placement(NamedTuple):
    """Pods over GPUs at one time: per pod its span and job, per GPU its pod and level row."""

    start: FloatArray
    end: FloatArray
    job: I64
    active: BoolArray
    gpu_pod: I64
    allocated: BoolArray
    row: I64


def _blank_state(levels: FloatArray) -> GaugeState:
    """Gauge state before faults and look-alikes: the workloads' levels, nothing added."""
    n = len(levels)
    return GaugeState(
        levels=levels,
        gpu_temp_add=np.zeros(n),
        mem_temp_add=np.zeros(n),
        temp_floor=np.full(n, np.nan),
        clock_bits=np.zeros(n, dtype=np.int64),
        xid=np.zeros(n),
        row_remap_failure=np.zeros(n),
    )


class FleetSimulator:
    """Deterministic metrics for a scenario; see the module docstring for the contract."""

    def __init__(self, scenario: Scenario, layout: Layout | None = None) -> None:
        sc = scenario
        self.scenario = sc
        self.layout = layout if layout is not None else build_layout(sc)
        lay = self.layout
        self.faults = resolve_faults(sc, lay)
        self.confounders = resolve_confounders(sc, lay)
        self.workloads = tuple(sc.workloads)
        self.job_index = {f"{w.namespace}/{w.name}": j for j, w in enumerate(self.workloads)}
        self.timelines: list[JobTimeline | None] = []
        for w in self.workloads:
            if w.kind != WorkloadKind.TRAINING:
                self.timelines.append(None)
                continue
            ivs = job_intervals(sc, w, self.faults, self.confounders)
            self.timelines.append(JobTimeline.build(sc.start + w.start, ivs))
        self.n_gpu = int(lay.gpu_uuid.shape[0])
        self.n_node = len(lay.nodes)
        self.gpu_node = lay.gpu_node.astype(np.int64)
        counts = np.array([n.gpus for n in lay.nodes], dtype=np.int64)
        self.node_first = np.concatenate(([0], np.cumsum(counts)[:-1]))
        self.node_pos = lay.node_position()
        self.base = baseline_columns([lay.nodes[i].model for i in self.gpu_node])
        rng = np.random.default_rng([_seed(sc.seed), 0xBA5E])
        n, nj = self.n_gpu, len(self.workloads)
        self.power_jit = rng.normal(1.0, 0.02, n)
        self.temp_off = rng.normal(0.0, 1.5, n)
        self.mem_temp_off = rng.normal(0.0, 1.5, n)
        static = counters.StaticCounters.draw(rng, self.base)
        # Silicon and slot variance that lasts (drawn from a generator of its own, so that the
        # draws above keep their values): per-GPU power efficiency, boost clock under load and
        # cooling (slot position, airflow) differ by a few per cent for the GPU's whole life.
        var = np.random.default_rng([_seed(sc.seed), 0x5111C0])
        self.power_off = np.clip(var.normal(1.0, 0.03, n), 0.92, 1.08)
        self.clock_off = np.clip(var.normal(1.0, 0.012, n), 0.965, 1.035)
        self.temp_slot = np.clip(var.normal(0.0, 2.0, n), -5.0, 5.0)
        self.work_extra = self._rank_imbalance(lay)
        self.tensor_scale = rng.uniform(0.85, 1.1, nj)
        self.fb_share = rng.uniform(0.7, 0.92, nj)
        self.diurnal_phase = rng.uniform(0.0, 2 * math.pi, nj)
        self.counter_context = counters.CounterContext(
            sc.start,
            self.workloads,
            tuple(self.timelines),
            self.diurnal_phase,
            static,
            self.faults,
            n,
        )
        self._layout_flat = self._flatten(tuple(lay.pods))
        self.xid_log = XidLog.build(self.faults, self.confounders, cascades=sc.exporter.real)
        self.exporter_restarts: list[tuple[int, float]] = []
        """(node position, unix time) of exporter restarts other than scenario confounders."""

    def exporter_restarted(self, node: str, t: float) -> None:
        """The node's dcgm-exporter (and its embedded host engine) started again at `t` (the
        node rebooted): the XID fields start empty. Wired to `SimCluster.repairs.on_boot`."""
        self.exporter_restarts.append((self.node_pos[node], t))

    def exporter_since(self, t: float) -> FloatArray:
        """Per GPU: when its exporter last started at or before `t` (-inf: before the scenario)."""
        since = np.full(self.n_node, -np.inf)
        restarts = [(c.node_position, c.end) for c in self.confounders if c.kind == "exporter_down"]
        for pos, at in [*restarts, *self.exporter_restarts]:
            if at <= t:
                since[pos] = max(since[pos], at)
        out: FloatArray = since[self.gpu_node]
        return out

    def end_faults(self, node: str, device: int, t: float) -> None:
        """A reset or reboot at unix time `t` fixed this GPU: its faults begun earlier end at `t`
        (the XID gauge clears, error counters stop growing; the volatile ECC counters start
        again from zero, remapped rows stay counted).
        Wired to `SimCluster.repairs.on_repair` by `simulator.serve`."""
        gpu = self.layout.gpu_position(node, device)
        self.faults = tuple(
            replace(f, end=min(f.end, t)) if f.gpu == gpu and f.start <= t else f
            for f in self.faults
        )
        resets = {**self.counter_context.reset_at, gpu: t}
        self.counter_context = replace(self.counter_context, faults=self.faults, reset_at=resets)

    def _rank_imbalance(self, lay: Layout) -> FloatArray:
        """Per GPU: the normal extra work of its rank (rank 0; a last pipeline stage)."""
        extra = np.zeros(self.n_gpu)
        last: dict[str, int] = {}
        for p in lay.pods:
            if p.kind == WorkloadKind.TRAINING:
                last[p.workload] = max(last.get(p.workload, 0), p.rank)
        for p in lay.pods:
            if p.kind != WorkloadKind.TRAINING:
                continue
            first = int(self.node_first[self.node_pos[p.node]])
            gpus = [first + d for d in p.gpu_indices]
            if p.rank == 0:
                extra[gpus] += RANK0_EXTRA
            if p.rank == last[p.workload] and p.rank > 0 and len(gpus) >= 4:
                extra[gpus] += LAST_STAGE_EXTRA
        return extra

    def _flatten(self, pods: tuple[SimPod, ...]) -> tuple[I64, I64]:
        """(GPU position, pod index) pairs for every GPU of every pod."""
        gpus: list[int] = []
        owners: list[int] = []
        for i, p in enumerate(pods):
            first = int(self.node_first[self.node_pos[p.node]])
            gpus.extend(first + d for d in p.gpu_indices)
            owners.extend([i] * len(p.gpu_indices))
        return np.array(gpus, dtype=np.int64), np.array(owners, dtype=np.int64)

    def step_index(self, t: float) -> int:
        return math.floor((t - self.scenario.start) / self.scenario.scrape_interval)

    def sample(self, t: float, pods: Sequence[SimPod] | None = None) -> Sample:
        """The fleet at unix time `t`; `pods` is the live placement (default: the layout's).

        Pass every pod that ever ran (ended ones with `end` set): counters integrate over each
        pod's life on its GPUs, so dropping an ended pod would take its traffic off the counter.
        """
        t = float(t)
        pods_t = tuple(self.layout.pods) if pods is None else tuple(pods)
        flat_gpu, flat_pod = self._layout_flat if pods is None else self._flatten(pods_t)
        place = self._placement(t, pods_t, flat_gpu, flat_pod)
        rng = np.random.default_rng([_seed(self.scenario.seed), _seed(self.step_index(t))])
        job_noise = rng.normal(0.0, 1.0, (len(self.workloads), 2))
        gpu_noise = rng.normal(0.0, 1.0, (self.n_gpu, 6))
        table, training = self._level_table(t, job_noise)
        st = _blank_state(table[place.row])
        gpu_job = np.where(place.row < len(self.workloads), place.row, -1)
        self._spread_ranks(st, gpu_job, training)
        real_exporter = self.scenario.exporter.real
        since = self.exporter_since(t) if real_exporter else np.full(self.n_gpu, -np.inf)
        xid_counts = self.xid_log.window_counts(t, XID_COUNT_WINDOW, since)
        if real_exporter:
            st.xid[:] = self.xid_log.last_code(t, since)
        lost = self._apply_faults(st, t, gpu_job, training, real_exporter)
        self._apply_confounders(st, t, real_exporter)
        metrics = self._gauges(st, gpu_noise, place.allocated)
        cnt = counters.fleet_counters(
            self.counter_context, t, pods_t, flat_gpu, flat_pod, place.start, place.end, place.job
        )
        metrics.update(cnt.metrics)
        exporter_up, scrape_ok = self._exporters_up(t)
        present = ~lost & ~self._gpu_gaps(t) & exporter_up[self.gpu_node] & scrape_ok
        for arr in metrics.values():
            arr[~present] = np.nan
        for arr in xid_counts.values():
            arr[~present] = np.nan
        steps = cnt.pod_steps
        steps[~place.active] = np.nan
        if not scrape_ok:
            steps[:] = np.nan
        return Sample(
            t=t,
            metrics=metrics,
            present=present,
            gpu_pod=place.gpu_pod.astype(np.int32),
            pods=pods_t,
            pod_steps=steps,
            exporter_up=exporter_up,
            scrape_ok=scrape_ok,
            xid_counts=xid_counts,
        )

    def _placement(
        self, t: float, pods_t: tuple[SimPod, ...], flat_gpu: I64, flat_pod: I64
    ) -> _Placement:
        """Which pod holds each GPU at `t`, and the level-table row each GPU reads."""
        nj, n = len(self.workloads), self.n_gpu
        p_start = np.array([p.start for p in pods_t], dtype=np.float64)
        p_end = np.array([math.inf if p.end is None else p.end for p in pods_t], dtype=np.float64)
        p_job = np.array([self.job_index.get(p.workload, -1) for p in pods_t], dtype=np.int64)
        active = (p_start <= t) & (t < p_end)
        gpu_pod = np.full(n, -1, dtype=np.int64)
        sel = active[flat_pod]
        gpu_pod[flat_gpu[sel]] = flat_pod[sel]
        allocated = gpu_pod >= 0
        pod_job = np.full(n, -1, dtype=np.int64)
        pod_job[allocated] = p_job[gpu_pod[allocated]]
        # Level table: one row per job, then "allocated, unknown workload" and "unallocated".
        row = np.where(allocated, np.where(pod_job >= 0, pod_job, nj), nj + 1)
        return _Placement(p_start, p_end, p_job, active, gpu_pod, allocated, row)

    def _level_table(self, t: float, job_noise: FloatArray) -> tuple[FloatArray, BoolArray]:
        """Per job its gauge levels at `t` (plus the two rows for no job), and which jobs train."""
        nj = len(self.workloads)
        table = np.empty((nj + 2, N_LEVELS), dtype=np.float64)
        training = np.zeros(nj, dtype=bool)
        for j, w in enumerate(self.workloads):
            tl = self.timelines[j]
            if tl is not None:
                training[j] = True
                lv = list(PHASE_LEVELS[tl.phase_at(t)])
                lv[TENSOR] *= self.tensor_scale[j]
                lv[FB] *= self.fb_share[j]
                lv[UTIL] = min(1.0, lv[UTIL] + 0.005 * job_noise[j, 0])
                lv[POWER] = lv[POWER] * (1.0 + 0.01 * job_noise[j, 1])
                table[j] = lv
            elif w.kind == WorkloadKind.INFERENCE:
                load = float(inference_load(w.load, t, float(self.diurnal_phase[j])))
                load = min(1.0, max(0.0, load + 0.04 * job_noise[j, 0]))
                table[j] = inference_levels(load, 0.9)
            else:
                table[j] = IDLE_POD_LEVELS
        table[nj] = IDLE_POD_LEVELS
        table[nj + 1] = UNALLOCATED_LEVELS
        return table, training

    def _spread_ranks(self, st: GaugeState, gpu_job: I64, training: BoolArray) -> None:
        """Normal per-rank imbalance while a job computes (it vanishes when every rank waits)."""
        nj = len(self.workloads)
        if not nj:
            return
        computing = (gpu_job >= 0) & training[np.clip(gpu_job, 0, nj - 1)]
        levels = st.levels
        busy = computing & (levels[:, TENSOR] > 0.1)
        extra = 1.0 + self.work_extra[busy]
        for col in (TENSOR, GR):
            levels[busy, col] = np.minimum(1.0, levels[busy, col] * extra)

    def _apply_faults(
        self,
        st: GaugeState,
        t: float,
        gpu_job: I64,
        training: BoolArray,
        real_exporter: bool,
    ) -> BoolArray:
        """Bend the gauges of GPUs with an active fault; returns the GPUs fallen off the bus."""
        lost = np.zeros(self.n_gpu, dtype=bool)
        for f in self.faults:
            if f.kind == FaultKind.XID79_FALLEN_OFF_BUS:
                lost[f.gpu] |= f.active(t)
            if not f.active(t):
                continue
            if f.kind in counters.FAULT_XID and not real_exporter:
                st.xid[f.gpu] = counters.FAULT_XID[f.kind]
            if f.kind == FaultKind.ROW_REMAP_FAILURE:
                st.row_remap_failure[f.gpu] = 1.0
            elif f.kind == FaultKind.THERMAL_THROTTLE:
                apply_thermal(st, f.gpu, f.severity)
            elif f.kind == FaultKind.POWER_BRAKE:
                apply_power_brake(st, f.gpu, f.severity)
            elif f.kind in NOVEL_FAULTS and f.kind != FaultKind.NVLINK_BW_COLLAPSE:
                b = self.base
                cap = float(b.fb_total_mib[f.gpu] - b.fb_reserved_mib[f.gpu])
                apply_novel(st, f.gpu, f.kind.value, f.severity, t - f.start, cap)
            elif f.kind == FaultKind.STRAGGLER:
                j = int(gpu_job[f.gpu])
                is_train = j >= 0 and bool(training[j])
                tl = self.timelines[j] if is_train else None
                if tl is not None and tl.phase_at(t) == Phase.TRAIN:
                    slow = STRAGGLER_SLOWDOWN * f.severity
                    apply_straggler(st, f.gpu, gpu_job, slow, True)
        return lost

    def _apply_confounders(self, st: GaugeState, t: float, real_exporter: bool) -> None:
        """Bend the gauges the benign look-alikes touch: application XIDs and power caps."""
        for c in self.confounders:
            if c.kind == "app_xid":
                g = c.gpus[0]
                if c.start <= t < c.end and st.xid[g] == 0 and not real_exporter:
                    st.xid[g] = c.xid
            elif c.kind == "power_cap" and c.start <= t < c.end and c.gpus:
                capped = np.array(c.gpus, dtype=np.int64)
                b = self.base
                span = b.max_power_w[capped] - b.idle_power_w[capped]
                level = (c.cap * b.max_power_w[capped] - b.idle_power_w[capped]) / span
                apply_power_cap(st, capped, np.clip(level, 0.0, 1.0))

    def _exporters_up(self, t: float) -> tuple[BoolArray, bool]:
        """Per node whether its exporter answers at `t`, and whether the scrape happened at all."""
        exporter_up = np.ones(self.n_node, dtype=bool)
        scrape_ok = True
        for c in self.confounders:
            if c.start <= t < c.end:
                if c.kind == "exporter_down":
                    exporter_up[c.node_position] = False
                elif c.kind == "scrape_gap":
                    scrape_ok = False
        return exporter_up, scrape_ok

    def _gpu_gaps(self, t: float) -> BoolArray:
        """Per GPU: its series are missing from this scrape (a `gpu_gap` confounder)."""
        gap = np.zeros(self.n_gpu, dtype=bool)
        for c in self.confounders:
            if c.kind == "gpu_gap" and c.start <= t < c.end:
                gap[list(c.gpus)] = True
        return gap

    def _gauges(
        self, st: GaugeState, noise: FloatArray, allocated: BoolArray
    ) -> dict[str, FloatArray]:
        b, lv = self.base, st.levels
        busy = lv[:, UTIL] > 0
        util = np.clip(np.rint(100 * lv[:, UTIL] + 1.2 * noise[:, 0] * busy), 0, 100)
        gr = np.clip(lv[:, GR] + 0.012 * noise[:, 1] * busy, 0, 1).round(6)
        tensor = np.clip(lv[:, TENSOR] * (1 + 0.03 * noise[:, 2]), 0, 1).round(6)
        dram = np.clip(lv[:, DRAM] * (1 + 0.03 * noise[:, 3]), 0, 1).round(6)
        span = b.max_power_w - b.idle_power_w
        jit = self.power_jit * self.power_off
        power = b.idle_power_w + lv[:, POWER] * span * jit + 0.006 * span * noise[:, 4]
        power = np.clip(power, 0.8 * b.idle_power_w, b.max_power_w).round(3)
        frac = (power - b.idle_power_w) / span
        gpu_t = b.gpu_temp_idle_c + (b.gpu_temp_load_c - b.gpu_temp_idle_c) * frac
        gpu_t = gpu_t + self.temp_off + self.temp_slot + 0.5 * noise[:, 5] + st.gpu_temp_add
        gpu_t = np.fmax(gpu_t, st.temp_floor)
        mem_t = b.mem_temp_idle_c + (b.mem_temp_load_c - b.mem_temp_idle_c) * frac
        mem_t = mem_t + self.mem_temp_off + 0.5 * noise[:, 5] + st.mem_temp_add
        top = b.sm_clock_max_mhz * np.where(lv[:, CLOCK] > 0, self.clock_off, 1.0)
        top = np.minimum(top, b.sm_clock_max_mhz)  # boost never exceeds the part's maximum
        clock = b.sm_clock_idle_mhz + lv[:, CLOCK] * (top - b.sm_clock_idle_mhz)
        clock = np.rint(clock / 15.0) * 15.0
        fb_cap = b.fb_total_mib - b.fb_reserved_mib
        fb_used = np.where(allocated, lv[:, FB] * fb_cap, 0.0)
        fb_used = np.rint(np.where(allocated & (lv[:, FB] == 0), IDLE_POD_FB_MIB, fb_used))
        bits = st.clock_bits.copy()
        bits |= np.where(lv[:, CLOCK] == 0, 0x1, 0)
        bits |= np.where(power >= 0.985 * b.max_power_w, 0x4, 0)
        return {
            "DCGM_FI_DEV_GPU_UTIL": util,
            "DCGM_FI_DEV_SM_CLOCK": clock,
            "DCGM_FI_DEV_MEM_CLOCK": b.mem_clock_mhz.copy(),
            "DCGM_FI_DEV_GPU_TEMP": np.rint(gpu_t),
            "DCGM_FI_DEV_MEMORY_TEMP": np.rint(mem_t),
            "DCGM_FI_DEV_POWER_USAGE": power,
            "DCGM_FI_DEV_FB_USED": fb_used,
            "DCGM_FI_DEV_FB_FREE": fb_cap - fb_used,
            "DCGM_FI_DEV_XID_ERRORS": st.xid,
            "DCGM_FI_DEV_ROW_REMAP_FAILURE": st.row_remap_failure,
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": bits.astype(np.float64),
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": gr,
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": tensor,
            "DCGM_FI_PROF_DRAM_ACTIVE": dram,
        }
