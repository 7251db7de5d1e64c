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

from detectors.base import DetectorSpec, gpu_context, node_name
from detectors.findings import Finding, FindingKind, Severity
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


_SPEC = {"onset": (np.float64, np.nan), "last_event": (np.float64, np.nan)}


def _gt(x: np.ndarray | None, limit: float) -> np.ndarray | None:
    if x is None:
        return None
    with np.errstate(invalid="ignore"):
        out: np.ndarray = np.nan_to_num(x, nan=-np.inf) >= limit
    return out


def detect(
    snapshot: FleetSnapshot, state: State | None, now: float, params: Params
) -> tuple[list[Finding], State]:
    n = len(snapshot.gpus)
    interval = scrape_interval(snapshot)
    age = params.max_age_intervals * interval
    cur = align(state.gpus if state else None, gpu_keys(snapshot), _SPEC)
    sev = np.full(n, NONE, dtype=np.int8)
    reasons: list[tuple[np.ndarray, str, int, np.ndarray | None]] = []

    def flag(mask: np.ndarray | None, text: str, rank: int, shown: np.ndarray | None) -> None:
        nonlocal sev
        if mask is None or not np.any(mask):
            return
        sev = np.where(mask, np.maximum(sev, rank), sev).astype(np.int8)
        reasons.append((mask, text, rank, shown))

    dbe = value(snapshot, DBE, now, age)
    flag(_gt(dbe, 1.0), "uncorrectable (double-bit) ECC errors since the last reset", C, dbe)
    remap_fail = value(snapshot, REMAP_FAIL, now, age)
    flag(_gt(remap_fail, 1.0), "row remapping failed", C, remap_fail)
    retired = None
    r_sbe, r_dbe = value(snapshot, RETIRED_SBE, now, age), value(snapshot, RETIRED_DBE, now, age)
    if r_sbe is not None or r_dbe is not None:
        retired = np.nan_to_num(r_sbe if r_sbe is not None else 0.0) + np.nan_to_num(
            r_dbe if r_dbe is not None else 0.0
        )
        flag(
            _gt(retired, params.retired_pages_failure), "retired pages at DCGM's limit", C, retired
        )
    flag(
        _gt(r_dbe, params.retired_dbe_warning), "pages retired by DBE past the soft limit", W, r_dbe
    )
    rows = value(snapshot, UNCORR_ROWS, now, age)
    flag(_gt(rows, params.uncorrectable_rows_warning), "uncorrectable remapped rows", W, rows)
    pending = value(snapshot, REMAP_PENDING, now, age)
    flag(_gt(pending, 1.0), "row remap pending: reset the GPU to apply it", W, pending)
    r_pending = value(snapshot, RETIRED_PENDING, now, age)
    flag(_gt(r_pending, 1.0), "page retirement pending: reset the GPU", W, r_pending)

    # Event-type signals, held for hold_seconds after the last increase.
    sbe_rate = rate(snapshot, SBE, now, age)
    sbe_storm = _gt(None if sbe_rate is None else sbe_rate * 60.0, params.sbe_per_minute)
    rows_inc = increase(snapshot, UNCORR_ROWS, now, age)
    new_row = _gt(rows_inc, 1.0)
    dbe_inc = increase(snapshot, DBE, now, age)
    new_dbe = _gt(dbe_inc, 1.0)
    event = np.zeros(n, dtype=bool)
    for m in (sbe_storm, new_row, new_dbe):
        if m is not None:
            event |= m
    last_event = np.where(event, now, cur["last_event"])
    held = (now - last_event) <= params.hold_seconds
    flag(held & ~event & np.isfinite(last_event), "recent memory error events", W, None)
    flag(
        sbe_storm,
        "single-bit ECC error storm (per minute)",
        W,
        None if sbe_rate is None else sbe_rate * 60.0,
    )
    flag(new_row, "new uncorrectable remapped row: reset the GPU to apply it", W, rows_inc)
    flag(new_dbe, "new double-bit ECC errors", C, dbe_inc)

    active = sev > NONE
    onset = np.where(active, np.fmin(cur["onset"], now), np.nan)
    g = snapshot.gpus
    findings: list[Finding] = []
    for i in np.flatnonzero(active):
        why = [(t, r, s) for m, t, r, s in reasons if m[i]]
        why.sort(key=lambda x: -x[1])
        rank = int(sev[i])
        ctx = gpu_context(snapshot, int(i))
        node = node_name(snapshot, int(g.node_index[i]))
        evidence = {
            **ctx,
            "signals": [t for t, _, _ in why],
            "values": {t: (None if s is None else round(float(s[i]), 3)) for t, _, s in why},
            "limits": {
                "sbe_per_minute": params.sbe_per_minute,
                "uncorrectable_rows_warning": params.uncorrectable_rows_warning,
                "retired_pages_failure": params.retired_pages_failure,
            },
        }
        severity = (
            Severity.CRITICAL if rank == C else Severity.WARNING if rank == W else Severity.INFO
        )
        action = (
            "drain the GPU's workload and reset the GPU; RMA if remapping failed or errors recur"
            if rank == C
            else "reset the GPU at the next drain; watch for escalation to uncorrectable errors"
        )
        findings.append(
            Finding(
                kind=FindingKind.GPU_MEMORY,
                severity=severity,
                summary=f"GPU {g.device_index[i]} on {node}: {why[0][0]}",
                first_seen=float(onset[i]),
                last_seen=now,
                node=node,
                gpu_uuid=str(g.uuid[i]),
                evidence=evidence,
                recommended_action=action,
            )
        )
    return findings, State(cur.replace(onset=onset, last_event=last_event))


SPEC = DetectorSpec(
    name="gpu_memory",
    params_type=Params,
    detect=detect,
    kinds=(FindingKind.GPU_MEMORY,),
    doc="DBE ECC, SBE storms, row-remap failure/pending, remapped rows, retired pages.",
)
