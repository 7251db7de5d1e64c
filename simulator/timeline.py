"""Each job's phases over time (train, eval, checkpoint, hang) and closed-form integrals of them.

Counters (NVLink bytes, training steps) must be monotone and a pure function of t, so they are
integrals of a piecewise-constant rate: a job's timeline is a sorted array of breakpoints with
one phase per segment and the running integral at each breakpoint; any t is one binary search.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from observer.fleet.model import FloatArray, IntArray
from simulator.scenario import Scenario, Workload, WorkloadKind
from simulator.targets import ResolvedConfounder, ResolvedFault

PERIODIC_HORIZON = 7 * 86400.0
"""Periodic checkpoints/evals are laid out this far past the scenario end (serve mode runs on)."""
DIURNAL_AMPLITUDE = 0.3
DAY = 86400.0
OMEGA = 2 * math.pi / DAY
STRAGGLER_SLOWDOWN = 0.25
"""A straggler at severity 1 makes its job's steps take ~25 % longer."""


class Phase(IntEnum):
    """Job phases, in priority order: a later one wins where two overlap."""

    TRAIN = 0
    EVAL = 1
    CHECKPOINT = 2
    HANG = 3


NVLINK_FACTOR = np.array([1.0, 0.15, 0.01, 0.0])
"""Share of the all-reduce NVLink rate per phase."""
STEP_FACTOR = np.array([1.0, 0.0, 0.0, 0.0])
"""Training steps advance only while training (evaluation and checkpoints hold them)."""


@dataclass(frozen=True, slots=True)
class PhaseInterval:
    phase: Phase
    start: float
    end: float
    periodic: bool
    slowdown: float = 0.0
    """For straggler intervals (phase TRAIN): the job runs 1 + slowdown times slower."""


def periodic_windows(first: float, every: float, length: float, until: float) -> list[float]:
    """Start times first+every, first+2*every, ... below `until`."""
    if every <= 0:
        return []
    count = max(0, math.ceil((until - first) / every) - 1)
    return [first + k * every for k in range(1, count + 1) if first + k * every < until]


def job_intervals(
    sc: Scenario,
    w: Workload,
    faults: tuple[ResolvedFault, ...],
    confounders: tuple[ResolvedConfounder, ...],
    horizon: float | None = None,
) -> list[PhaseInterval]:
    """Every phase change of one workload (periodic ones up to `horizon`, default end + 7 d)."""
    key = f"{w.namespace}/{w.name}"
    start = sc.start + w.start
    stop = sc.end + PERIODIC_HORIZON if horizon is None else horizon
    if w.end is not None:
        stop = min(stop, sc.start + w.end)
    out: list[PhaseInterval] = []
    if w.kind == WorkloadKind.TRAINING:
        if w.checkpoint_every:
            for s in periodic_windows(start, w.checkpoint_every, w.checkpoint_duration, stop):
                out.append(PhaseInterval(Phase.CHECKPOINT, s, s + w.checkpoint_duration, True))
        if w.eval_every:
            for s in periodic_windows(start, w.eval_every, w.eval_duration, stop):
                out.append(PhaseInterval(Phase.EVAL, s, s + w.eval_duration, True))
    for c in confounders:
        if c.job == key and c.kind in ("checkpoint", "eval_phase"):
            phase = Phase.CHECKPOINT if c.kind == "checkpoint" else Phase.EVAL
            out.append(PhaseInterval(phase, c.start, c.end, False))
    for f in faults:
        if f.job != key:
            continue
        if f.kind == "nccl_hang":
            out.append(PhaseInterval(Phase.HANG, f.start, f.end, False))
        elif f.kind == "straggler":
            slow = STRAGGLER_SLOWDOWN * f.severity
            out.append(PhaseInterval(Phase.TRAIN, f.start, f.end, False, slow))
    return sorted(out, key=lambda i: (i.start, i.phase))


@dataclass(frozen=True, slots=True)
class JobTimeline:
    breaks: FloatArray
    """Segment starts; segment k is [breaks[k], breaks[k+1]), the last one open."""
    phase: IntArray
    slowdown: FloatArray
    nvlink_cum: FloatArray
    """Integral of the NVLink factor from breaks[0] to breaks[k]."""
    steps_cum: FloatArray

    @staticmethod
    def build(origin: float, intervals: list[PhaseInterval]) -> JobTimeline:
        edges = {origin}
        for i in intervals:
            edges.update(x for x in (i.start, i.end) if math.isfinite(x) and x > origin)
        breaks = np.array(sorted(edges), dtype=np.float64)
        mids = np.append((breaks[:-1] + breaks[1:]) / 2, breaks[-1] + 1.0)
        phase = np.zeros(mids.size, dtype=np.int32)
        slowdown = np.zeros(mids.size, dtype=np.float64)
        for i in intervals:
            inside = (mids >= i.start) & (mids < i.end)
            if i.slowdown:
                slowdown[inside] = np.maximum(slowdown[inside], i.slowdown)
            else:
                phase[inside] = np.maximum(phase[inside], int(i.phase))
        speed = 1.0 / (1.0 + slowdown)
        nvl = NVLINK_FACTOR[phase] * speed
        steps = STEP_FACTOR[phase] * speed
        widths = np.diff(breaks)
        nvl_cum = np.concatenate(([0.0], np.cumsum(nvl[:-1] * widths)))
        steps_cum = np.concatenate(([0.0], np.cumsum(steps[:-1] * widths)))
        return JobTimeline(breaks, phase, slowdown, nvl_cum, steps_cum)

    def segment(self, t: float) -> int:
        return max(0, int(np.searchsorted(self.breaks, t, side="right")) - 1)

    def phase_at(self, t: float) -> Phase:
        return Phase(int(self.phase[self.segment(t)]))

    def slowdown_at(self, t: float) -> float:
        return float(self.slowdown[self.segment(t)])

    def _cum(self, x: FloatArray, cum: FloatArray, factor: FloatArray) -> FloatArray:
        x = np.maximum(x, self.breaks[0])
        k = np.maximum(np.searchsorted(self.breaks, x, side="right") - 1, 0)
        return cum[k] + factor[k] * (x - self.breaks[k])

    def nvlink_integral(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """Seconds-equivalent of all-reduce traffic in [a, b) (0 where b <= a)."""
        f = NVLINK_FACTOR[self.phase] / (1.0 + self.slowdown)
        return np.maximum(self._cum(b, self.nvlink_cum, f) - self._cum(a, self.nvlink_cum, f), 0)

    def nvlink_factor_at(self, t: float) -> float:
        """Share of the all-reduce NVLink rate at `t` (the derivative of `nvlink_integral`)."""
        k = self.segment(t)
        return float(NVLINK_FACTOR[self.phase[k]] / (1.0 + self.slowdown[k]))

    def step_integral(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """Seconds of full-speed training in [a, b): divide by step_time to get steps."""
        f = STEP_FACTOR[self.phase] / (1.0 + self.slowdown)
        return np.maximum(self._cum(b, self.steps_cum, f) - self._cum(a, self.steps_cum, f), 0)


def inference_load(load: float, t: float | FloatArray, phase: float) -> FloatArray:
    """Diurnal load around `load` (before noise and clipping)."""
    return load * (1.0 + DIURNAL_AMPLITUDE * np.sin(OMEGA * np.asarray(t) + phase))


def inference_load_integral(load: float, a: FloatArray, b: FloatArray, phase: float) -> FloatArray:
    """Closed-form integral of `inference_load` over [a, b) (0 where b <= a)."""

    def prim(x: FloatArray) -> FloatArray:
        return load * (x - DIURNAL_AMPLITUDE / OMEGA * np.cos(OMEGA * x + phase))

    b = np.maximum(a, b)
    return np.maximum(prim(b) - prim(a), 0.0)
