"""gpu_memory: uncorrectable ECC, SBE storms, row-remap failure and pending remaps, retired pages.

HBM errors escalate: a burst of corrected (single-bit) errors precedes uncorrectable ones; an
uncorrectable error remaps a row, which only takes effect after a GPU reset; a failed remap means
the GPU cannot heal itself. Signals and limits follow DCGM: volatile DBE > 0 means an
uncorrectable error since the driver loaded (reset it), ROW_REMAP_FAILURE is terminal, 512
uncorrectable remapped rows is DCGM's warning line, 63 retired pages its failure line (15 from
DBE). Counters are read through reset-aware increases; a reset never reads as new errors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from detectors.base import DetectorSpec, Needs, gpu_context, node_name
from detectors.findings import PRE_EXISTING_NOTE, Finding, FindingKind, Severity
from detectors.signals import increase, rate, scrape_interval, value
from detectors.state import KeyedArrays, align, gpu_keys
from observer.fleet.model import FleetSnapshot

DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
SBE = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"
REMAP_FAIL = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
REMAP_PENDING = "DCGM_FI_DEV_ROW_REMAP_PENDING"
UNCORR_ROWS = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
RETIRED_SBE = "DCGM_FI_DEV_RETIRED_SBE"
RETIRED_DBE = "DCGM_FI_DEV_RETIRED_DBE"
RETIRED_PENDING = "DCGM_FI_DEV_RETIRED_PENDING"
C, W = Severity.CRITICAL.rank, Severity.WARNING.rank
NONE = -1


@dataclass(frozen=True, slots=True)
class Params:
    sbe_per_minute: float = 10.0
    """Healthy HBM corrects a handful of single-bit errors a day; ten a minute is a failing cell
    or row (the regime NVIDIA flags with XID 92) and predicts an uncorrectable error."""
    uncorrectable_rows_warning: float = 512.0
    """DCGM's limit for uncorrectable remapped rows."""
    retired_pages_failure: float = 63.0
    """DCGM fails a GPU at 63 retired pages (pre-A100 page retirement)."""
    retired_dbe_warning: float = 15.0
    """DCGM's soft limit for pages retired by double-bit errors."""
    hold_seconds: float = 600.0
    """Event-type signals (an SBE burst, a new remapped row) stay reported this long after the
    last increase, so that one quiet window does not split one bad episode."""
    max_age_intervals: float = 2.5


@dataclass(frozen=True, slots=True)
class State:
    gpus: KeyedArrays

    def nbytes(self) -> int:
        return self.gpus.nbytes()


_SPEC = {
    "onset": (np.float64, np.nan),
    "last_event": (np.float64, np.nan),
    "pre": (np.float32, np.nan),  # NaN: never seen; 1: the episode is all pre-existing evidence
    "sev": (np.float32, np.nan),  # the episode's severity rank last cycle
}


def _gt(x: np.ndarray | None, limit: float) -> np.ndarray | None:
    if x is None:
        return None
    with np.errstate(invalid="ignore"):
        out: np.ndarray = np.nan_to_num(x, nan=-np.inf) >= limit
    return out


@dataclass(frozen=True, slots=True)
class _Reason:
    """One signal over its limit: on which GPUs, what it means, its severity, the value shown."""

    mask: np.ndarray
    text: str
    rank: int
    shown: np.ndarray | None


def _flag(
    out: list[_Reason], mask: np.ndarray | None, text: str, rank: int, shown: np.ndarray | None
) -> None:
    if mask is not None and np.any(mask):
        out.append(_Reason(mask, text, rank, shown))


def _level_reasons(
    snapshot: FleetSnapshot, now: float, age: float, params: Params
) -> list[_Reason]:
    """Evidence from totals and states (DBE since reset, remap failure, retired pages, ...)."""
    out: list[_Reason] = []
    dbe = value(snapshot, DBE, now, age)
    _flag(out, _gt(dbe, 1.0), "uncorrectable (double-bit) ECC errors since the last reset", C, dbe)
    remap_fail = value(snapshot, REMAP_FAIL, now, age)
    _flag(out, _gt(remap_fail, 1.0), "row remapping failed", C, remap_fail)
    r_sbe, r_dbe = value(snapshot, RETIRED_SBE, now, age), value(snapshot, RETIRED_DBE, now, age)
    if r_sbe is not None or r_dbe is not None:
        retired = np.nan_to_num(r_sbe if r_sbe is not None else 0.0) + np.nan_to_num(
            r_dbe if r_dbe is not None else 0.0
        )
        over = _gt(retired, params.retired_pages_failure)
        _flag(out, over, "retired pages at DCGM's limit", C, retired)
    over_dbe = _gt(r_dbe, params.retired_dbe_warning)
    _flag(out, over_dbe, "pages retired by DBE past the soft limit", W, r_dbe)
    rows = value(snapshot, UNCORR_ROWS, now, age)
    _flag(out, _gt(rows, params.uncorrectable_rows_warning), "uncorrectable remapped rows", W, rows)
    pending = value(snapshot, REMAP_PENDING, now, age)
    _flag(out, _gt(pending, 1.0), "row remap pending: reset the GPU to apply it", W, pending)
    r_pending = value(snapshot, RETIRED_PENDING, now, age)
    _flag(out, _gt(r_pending, 1.0), "page retirement pending: reset the GPU", W, r_pending)
    return out


def _event_reasons(
    snapshot: FleetSnapshot, now: float, age: float, last_event: np.ndarray, params: Params
) -> tuple[list[_Reason], np.ndarray]:
    """Evidence from increases (SBE storm, new remapped row, new DBE), held for hold_seconds
    after the last one; returns the reasons and which GPUs had an increase this cycle."""
    n = len(snapshot.gpus)
    sbe_rate = rate(snapshot, SBE, now, age)
    sbe_per_minute = None if sbe_rate is None else sbe_rate * 60.0
    sbe_storm = _gt(sbe_per_minute, params.sbe_per_minute)
    rows_inc = increase(snapshot, UNCORR_ROWS, now, age)
    new_row = _gt(rows_inc, 1.0)
    dbe_inc = increase(snapshot, DBE, now, age)
    new_dbe = _gt(dbe_inc, 1.0)
    event = np.zeros(n, dtype=bool)
    for m in (sbe_storm, new_row, new_dbe):
        if m is not None:
            event |= m
    last = np.where(event, now, last_event)
    held = ((now - last) <= params.hold_seconds) & ~event & np.isfinite(last)
    out: list[_Reason] = []
    _flag(out, held, "recent memory error events", W, None)
    _flag(out, sbe_storm, "single-bit ECC error storm (per minute)", W, sbe_per_minute)
    _flag(out, new_row, "new uncorrectable remapped row: reset the GPU to apply it", W, rows_inc)
    _flag(out, new_dbe, "new double-bit ECC errors", C, dbe_inc)
    return out, event


def detect(
    snapshot: FleetSnapshot, state: State | None, now: float, params: Params
) -> tuple[list[Finding], State]:
    n = len(snapshot.gpus)
    interval = scrape_interval(snapshot)
    age = params.max_age_intervals * interval
    cur = align(state.gpus if state else None, gpu_keys(snapshot), _SPEC)
    levels = _level_reasons(snapshot, now, age, params)
    events, event = _event_reasons(snapshot, now, age, cur["last_event"], params)
    reasons = levels + events

    # Decision: the worst signal sets the severity. Evidence gpufleet did not see appear (the
    # GPU's first cycle: totals with no earlier value, increases over a window that began
    # before it watched) is pre-existing until something new shows while it watches: an
    # increase, or a severity above the episode's.
    sev = np.full(n, NONE, dtype=np.int8)
    for r in reasons:
        sev = np.where(r.mask, np.maximum(sev, r.rank), sev).astype(np.int8)
    active = sev > NONE
    onset = np.where(active, np.fmin(cur["onset"], now), np.nan)
    first_sight = np.isnan(cur["pre"])
    was_active = ~np.isnan(cur["onset"])
    prev_sev = np.where(was_active, np.nan_to_num(cur["sev"], nan=NONE), NONE)
    new_while_watching = ~first_sight & (event | (sev > prev_sev))
    pre = np.where(first_sight, active, active & (cur["pre"] > 0) & ~new_while_watching)
    last_event = np.where(event, now, cur["last_event"])

    findings = [
        _finding(snapshot, int(i), reasons, int(sev[i]), float(onset[i]), bool(pre[i]), now, params)
        for i in np.flatnonzero(active)
    ]
    new = cur.replace(
        onset=onset,
        last_event=last_event,
        pre=pre.astype(np.float32),
        sev=np.where(active, sev, NONE).astype(np.float32),
    )
    return findings, State(new)


def _finding(
    snapshot: FleetSnapshot,
    i: int,
    reasons: list[_Reason],
    rank: int,
    onset: float,
    pre_existing: bool,
    now: float,
    params: Params,
) -> Finding:
    """Output: one finding per GPU, its signals worst first."""
    g = snapshot.gpus
    why = [r for r in reasons if r.mask[i]]
    why.sort(key=lambda r: -r.rank)
    node = node_name(snapshot, int(g.node_index[i]))
    evidence = {
        **gpu_context(snapshot, i),
        "signals": [r.text for r in why],
        "values": {r.text: (None if r.shown is None else round(float(r.shown[i]), 3)) for r in why},
        "limits": {
            "sbe_per_minute": params.sbe_per_minute,
            "uncorrectable_rows_warning": params.uncorrectable_rows_warning,
            "retired_pages_failure": params.retired_pages_failure,
        },
    }
    if pre_existing:
        evidence["pre_existing"] = PRE_EXISTING_NOTE
    severity = Severity.CRITICAL if rank == C else Severity.WARNING if rank == W else Severity.INFO
    action = (
        "drain the GPU's workload and reset the GPU; RMA if remapping failed or errors recur"
        if rank == C
        else "reset the GPU at the next drain; watch for escalation to uncorrectable errors"
    )
    return Finding(
        kind=FindingKind.GPU_MEMORY,
        severity=severity,
        summary=f"GPU {g.device_index[i]} on {node}: {why[0].text}"
        + (f" ({PRE_EXISTING_NOTE})" if pre_existing else ""),
        first_seen=onset,
        last_seen=now,
        node=node,
        gpu_uuid=str(g.uuid[i]),
        evidence=evidence,
        recommended_action=action,
        pre_existing=pre_existing,
    )


NEEDS = Needs(
    ((DBE, SBE, REMAP_FAIL, REMAP_PENDING, UNCORR_ROWS, RETIRED_SBE, RETIRED_DBE),),
    (DBE, SBE, REMAP_FAIL, REMAP_PENDING, UNCORR_ROWS),
    {
        DBE: "no uncorrectable ECC counts: infers from remapped rows and remap failure "
        "(an uncorrectable error remaps a row)",
        SBE: "no single-bit ECC storms: the early warning before uncorrectable errors is lost",
        REMAP_PENDING: "pending row remaps unseen until the rows are counted",
        REMAP_FAIL: "a failed row remap is unseen",
        UNCORR_ROWS: "remapped rows unseen",
    },
    {
        DBE: (UNCORR_ROWS, REMAP_FAIL),
        SBE: (),
        REMAP_PENDING: (UNCORR_ROWS,),
        REMAP_FAIL: (),
        UNCORR_ROWS: (),
    },
)
"""The fields this detector reads, for detectors.coverage: what it needs to run at all,
what full evidence is, and what it infers from when a field is missing."""


SPEC = DetectorSpec(
    needs=NEEDS,
    name="gpu_memory",
    params_type=Params,
    detect=detect,
    kinds=(FindingKind.GPU_MEMORY,),
    severities=(Severity.CRITICAL, Severity.WARNING),
    doc="DBE ECC, SBE storms, row-remap failure/pending, remapped rows, retired pages.",
)
