"""gpu_throttle: harmful clock-event reasons, or an SM clock far below model peers, under load.

Only four clock-event bits mean the hardware is protecting itself — HW_SLOWDOWN (0x8),
SW_THERMAL (0x20), HW_THERMAL (0x40), HW_POWER_BRAKE (0x80), the ones DCGM diagnostics fail
on; idle, power-cap, sync-boost and app-clock reasons are normal operation. They count whatever
the load (an idle GPU cannot reach a thermal slowdown unless its cooling has failed, and a power
brake is an external signal), but only when they hold: power brake and slowdown bits flap on
transients (NVSentinel #1447), so a leaky persistence counter must reach `min_seconds` first.
Where the reasons field is not collected (it is off in dcgm-exporter's defaults), an SM clock
20 % below the median of busy GPUs of the same model stands in, but only with a cause the
exporter does show: the GPU 10 C hotter than those peers (thermal), or its clock cut by 40 % or
more (a power brake slams clocks down). A software power cap lowers clocks too, with no reason
bit to say so, and leaves the GPU cool: measured on lab/sweeps/sweep-throttle-clock-30s, a
job capped at 60 % of TDP read 18-20 % below its peers and drew 22 false warnings without this.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from detectors.base import DetectorSpec, Needs, gpu_context, node_name
from detectors.findings import Finding, FindingKind, Severity
from detectors.signals import (
    GPU_TEMP,
    POWER,
    SM_CLOCK,
    THROTTLE,
    UTIL,
    dt_since,
    group_median,
    hysteresis,
    persist,
    scrape_interval,
    value,
)
from detectors.state import GpuCycleState, align, gpu_keys
from observer.fleet.catalog import HARMFUL_CLOCK_EVENTS, ClockEventReason
from observer.fleet.model import BoolArray, FleetSnapshot, FloatArray, IntArray

_ACTIONS = {
    ClockEventReason.HW_POWER_BRAKE: "check the node's power delivery (PSU, power brake signal)",
    ClockEventReason.HW_THERMAL: "check cooling: inlet temperature, fans, airflow, heatsink",
    ClockEventReason.SW_THERMAL: "check cooling: the GPU hits its thermal slowdown limit",
    ClockEventReason.HW_SLOWDOWN: "check power and cooling (HW slowdown asserted)",
}


@dataclass(frozen=True, slots=True)
class Params:
    busy_util: float = 50.0
    """The clock fallback judges only above 50 % utilisation: below that the GPU downclocks
    by design."""
    min_seconds: float = 60.0
    """Harmful reasons must hold for a minute (two 30 s scrapes) before it is a finding."""
    clock_drop: float = 0.2
    """Without the reasons field: SM clock 20 % below the model's busy median. Healthy boost
    clocks under load spread by a few percent; a 20 % drop is a thermal or power limit."""
    min_peers: int = 8
    """The clock fallback needs at least 8 busy GPUs of the same model to form a baseline."""
    hot_margin_c: float = 10.0
    """Clock fallback, thermal cause: the GPU this much hotter than its model's busy median.
    Persistent slot and silicon offsets spread busy GPUs by ~±5 C."""
    brake_drop: float = 0.4
    """Clock fallback, power-brake cause: the clock this far below the busy median. A brake
    cuts clocks toward idle; a software cap at half of TDP costs ~25 %."""
    max_age_intervals: float = 2.5


State = GpuCycleState


_SPEC = {"acc": (np.float32, 0.0), "onset": (np.float64, np.nan)}


def detect(
    snapshot: FleetSnapshot, state: State | None, now: float, params: Params
) -> tuple[list[Finding], State]:
    g = snapshot.gpus
    n = len(g)
    interval = scrape_interval(snapshot)
    age = params.max_age_intervals * interval
    cur = align(state.gpus if state else None, gpu_keys(snapshot), _SPEC)
    dt = dt_since(state.last_now if state else np.nan, now, interval)
    util = value(snapshot, UTIL, now, age)
    clock = value(snapshot, SM_CLOCK, now, age)
    reasons = value(snapshot, THROTTLE, now, age)
    temp = value(snapshot, GPU_TEMP, now, age)
    busy = (
        np.nan_to_num(util, nan=0.0) >= params.busy_util
        if util is not None
        else np.zeros(n, dtype=bool)
    )
    bits, has_bits = _reason_bits(reasons, n)
    harmful = bits & int(HARMFUL_CLOCK_EVENTS)
    baseline, slow = _slow_clocks(snapshot, busy, has_bits, clock, temp, params)
    flagged = (harmful != 0) | slow
    acc = persist(cur["acc"], flagged, dt, params.min_seconds)
    active = hysteresis(acc, ~np.isnan(cur["onset"]), params.min_seconds)
    onset = np.where(active, np.fmin(cur["onset"], now - acc.astype(np.float64)), np.nan)
    findings: list[Finding] = []
    compared = _Compared(clock, temp, g.model_index)
    for i in np.flatnonzero(active):
        names = [r.name or "" for r in ClockEventReason if int(r) & int(harmful[i])]
        ctx = gpu_context(snapshot, int(i))
        node = node_name(snapshot, int(g.node_index[i]))
        what, action = _cause(names, int(harmful[i]))
        findings.append(
            Finding(
                kind=FindingKind.GPU_THROTTLE,
                severity=Severity.WARNING,
                summary=f"GPU {g.device_index[i]} on {node} throttled "
                + ("under load" if busy[i] else "while idle (cooling or power failure)")
                + f": {what}",
                first_seen=float(onset[i]),
                last_seen=now,
                node=node,
                gpu_uuid=str(g.uuid[i]),
                evidence={
                    **ctx,
                    "clock_event_reasons": int(bits[i]) if has_bits[i] else None,
                    "harmful_reasons": names,
                    "sm_clock_mhz": None if clock is None else float(clock[i]),
                    "model_busy_median_mhz": None
                    if np.isnan(baseline[i])
                    else round(float(baseline[i]), 1),
                    "util": None if util is None else float(util[i]),
                    "gpu_temp_c": None if temp is None else float(temp[i]),
                    "persisted_s": round(float(acc[i]), 1),
                    **compared(int(i), baseline, params),
                },
                recommended_action=action + "; cordon the node if it persists",
            )
        )
    return findings, State(cur.replace(acc=acc, onset=onset), now)


class _Compared:
    """A GPU's clock and temperature beside its model's other GPUs' medians and the limits the
    clock fallback draws from them: a person sees the comparison even when the reason bits
    fired the finding and too few busy peers made no baseline (an idle or small fleet).

    Each model's values are sorted once per cycle, and a GPU's peers' median is read off them
    with the GPU's own value left out: the same number as `np.median` over its peers, without a
    pass over the fleet per finding (issue 25: ~2 ms a finding at 100k GPUs, 50 findings)."""

    def __init__(
        self, clock: FloatArray | None, temp: FloatArray | None, model_index: IntArray
    ) -> None:
        self.values = (("sm_clock_mhz", clock), ("gpu_temp_c", temp))
        self.model_index = model_index
        self.sorted: dict[tuple[str, int], FloatArray] = {}
        self.members: dict[int, int] = {}

    def __call__(self, i: int, baseline: FloatArray, params: Params) -> dict[str, float]:
        out: dict[str, float] = {}
        model = int(self.model_index[i])
        base = float(baseline[i])
        for name, values in self.values:
            if values is None:
                continue
            med = _median_without(self._sorted(name, values, model), float(values[i]))
            if med is None:
                continue
            out[f"peers_median_{name}"] = round(med, 1)
            if name == "sm_clock_mhz":
                ref = base if base == base else med
                out[f"threshold_{name}"] = round((1.0 - params.clock_drop) * ref, 1)
            else:
                out[f"threshold_{name}"] = round(med + params.hot_margin_c, 1)
        if out:
            if model not in self.members:
                self.members[model] = int(np.count_nonzero(self.model_index == model))
            out["peers_compared"] = float(self.members[model] - 1)
        return out

    def _sorted(self, name: str, values: FloatArray, model: int) -> FloatArray:
        key = (name, model)
        if key not in self.sorted:
            mine = values[self.model_index == model]
            self.sorted[key] = np.sort(mine[~np.isnan(mine)])
        return self.sorted[key]


def _median_without(ordered: FloatArray, own: float) -> float | None:
    """`np.median` of sorted `ordered` with one value equal to `own` left out (none if `own` is
    NaN); None when nothing is left."""
    skip = int(np.searchsorted(ordered, own)) if own == own else ordered.size
    m = ordered.size - (skip < ordered.size)

    if m == 0:
        return None
    lo, hi = ((q if q < skip else q + 1) for q in ((m - 1) // 2, m // 2))
    return float(ordered[lo] if lo == hi else (ordered[lo] + ordered[hi]) / 2)


def _hot(
    temp: FloatArray | None,
    peers: IntArray,
    model_index: IntArray,
    n_models: int,
    params: Params,
) -> BoolArray:
    """GPUs `hot_margin_c` hotter than the busy median of their model (none without temps)."""
    n = len(model_index)
    if temp is None or n_models == 0:
        return np.zeros(n, dtype=bool)
    med = group_median(temp, peers, n_models)
    base = med[np.clip(model_index, 0, n_models - 1)]
    with np.errstate(invalid="ignore"):
        hot: BoolArray = temp >= base + params.hot_margin_c
    return hot


def _reason_bits(reasons: FloatArray | None, n: int) -> tuple[np.ndarray, BoolArray]:
    """The clock-event reason bits per GPU, and where the exporter reported them at all."""
    bits = np.zeros(n, dtype=np.int64)
    has_bits = np.zeros(n, dtype=bool)
    if reasons is not None:
        has_bits = ~np.isnan(reasons)
        bits = np.nan_to_num(reasons, nan=0.0).astype(np.int64)
    return bits, has_bits


def _slow_clocks(
    snapshot: FleetSnapshot,
    busy: BoolArray,
    has_bits: BoolArray,
    clock: FloatArray | None,
    temp: FloatArray | None,
    params: Params,
) -> tuple[FloatArray, BoolArray]:
    """Without reason bits, a busy GPU's SM clock well below its model's busy median, hot or
    braked, is throttled; returns that median per GPU (NaN: too few peers) and the slow GPUs."""
    g = snapshot.gpus
    n = len(g)
    baseline = np.full(n, np.nan)
    slow = np.zeros(n, dtype=bool)
    if clock is not None:
        peers = np.where(busy & ~np.isnan(clock), g.model_index, -1).astype(np.int32)
        n_models = len(g.models)
        counts = np.bincount(peers[peers >= 0], minlength=n_models)
        med = group_median(clock, peers, n_models)
        med = np.where(counts >= params.min_peers, med, np.nan)
        baseline = med[np.clip(g.model_index, 0, max(n_models - 1, 0))] if n_models else baseline
        with np.errstate(invalid="ignore"):
            slow = busy & ~has_bits & (clock < (1.0 - params.clock_drop) * baseline)
            slow &= _hot(temp, peers, g.model_index, n_models, params) | (
                clock < (1.0 - params.brake_drop) * baseline
            )
    return baseline, slow


def _cause(names: list[str], harmful: int) -> tuple[str, str]:
    """What slowed the GPU (its harmful reason bits, else the slow clock) and what to check."""
    if names:
        action = next(
            (_ACTIONS[r] for r in _ACTIONS if int(r) & harmful),
            _ACTIONS[ClockEventReason.HW_SLOWDOWN],
        )
        return "/".join(names), action
    return "SM clock below its model's busy peers", (
        "check cooling and power; run DCGM diag level 2 on the GPU"
    )


NEEDS = Needs(
    ((THROTTLE, SM_CLOCK),),
    (THROTTLE, SM_CLOCK, UTIL, GPU_TEMP),
    {
        THROTTLE: "no clock-event reasons: infers throttling from the SM clock 20 % below its "
        "model peers while busy, with a cause: 10 C hotter than them (thermal) or a 40 % cut "
        "(brake); a cool GPU 20-40 % slow is not told from a software power cap",
        SM_CLOCK: "reason bits only: a slow clock with no reason bit is unseen",
        UTIL: "cannot tell busy from idle GPUs: clock comparisons skipped",
        GPU_TEMP: "no temperature: without reason bits too, only clock cuts of 40 % or more "
        "(a brake) are seen, a thermal slowdown is not told from a power cap",
    },
    {
        THROTTLE: (SM_CLOCK, UTIL, GPU_TEMP, POWER),
        SM_CLOCK: (THROTTLE,),
        UTIL: (),
        GPU_TEMP: (SM_CLOCK,),
    },
)
"""The fields this detector reads, for detectors.coverage: what it needs to run at all,
what full evidence is, and what it infers from when a field is missing."""


SPEC = DetectorSpec(
    needs=NEEDS,
    name="gpu_throttle",
    params_type=Params,
    detect=detect,
    kinds=(FindingKind.GPU_THROTTLE,),
    severities=(Severity.WARNING,),
    doc="Clock-event bits 0x8/0x20/0x40/0x80 while busy; SM clock below model peers.",
)
