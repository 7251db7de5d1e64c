"""gpu_xid: XID errors with NVIDIA's recommended action, repeats included.

dcgm-exporter's `DCGM_FI_DEV_XID_ERRORS` gauge holds only the *last* XID code (dcgm-exporter
#190/#500), so a new XID is a change of that value, and a repeat of the same code is visible
only in the optional `DCGM_EXP_XID_ERRORS_COUNT` gauge (XIDs within its last 5-minute window).
Codes whose action needs a reset, reboot or support are critical and stay reported while the
gauge still holds the code (the driver clears it on reset, so a held code means "not reset
yet"); application-class codes are reported for `hold_seconds` after the last occurrence, info
unless they repeat.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from detectors.base import DetectorSpec, Needs, gpu_context, node_name
from detectors.findings import Finding, FindingKind, Severity
from detectors.signals import XID, scrape_interval, value
from detectors.state import GpuCycleState, align, gpu_keys
from observer.fleet.catalog import XID_COUNT_METRIC, XIDS, XidAction, xid_info
from observer.fleet.model import FleetSnapshot

CRITICAL_ACTIONS = frozenset(
    {
        XidAction.RESET_GPU,
        XidAction.DRAIN_AND_RESET,
        XidAction.RESTART_BM,
        XidAction.RESTART_VM,
        XidAction.CONTACT_SUPPORT,
    }
)
WARNING_ACTIONS = frozenset({XidAction.DECODE, XidAction.RESTART_FM})
ACTION_TEXT = {
    XidAction.IGNORE: "none (informational XID)",
    XidAction.RESTART_APP: "restart the application; if it repeats on this GPU, run DCGM diag",
    XidAction.RESTART_FM: "restart NVIDIA Fabric Manager on the node",
    XidAction.RESET_GPU: "drain the GPU's workload and reset the GPU",
    XidAction.DRAIN_AND_RESET: "drain the node and reset the GPU",
    XidAction.RESTART_BM: "cordon and drain the node, then reboot it",
    XidAction.RESTART_VM: "restart the VM",
    XidAction.CONTACT_SUPPORT: "cordon the node and contact NVIDIA support",
    XidAction.DECODE: "decode the XID message (NVLink link and cause), check the link",
    XidAction.FOLLOW_MESSAGE: "follow the recovery action in the XID message",
}
_TABLE_SIZE = 256


UNKNOWN_NOTE = "unknown XID, see NVIDIA's XID catalog"
PRE_EXISTING_NOTE = "present before gpufleet started"


def _severity_table() -> np.ndarray:
    """XID code -> severity rank for plain occurrences (index = code). Codes missing from the
    catalog are warnings, never critical by default: a person looks them up."""
    table = np.full(_TABLE_SIZE, Severity.WARNING.rank, dtype=np.int8)
    for code in range(_TABLE_SIZE):
        if code not in XIDS:
            continue
        action = xid_info(code).action
        if action in CRITICAL_ACTIONS:
            table[code] = Severity.CRITICAL.rank
        elif action not in WARNING_ACTIONS:
            table[code] = Severity.INFO.rank
    return table


_SEVERITY = _severity_table()
_KNOWN_CODES = np.array(sorted(XIDS), dtype=np.int64)
_BY_RANK = {s.rank: s for s in Severity}


@dataclass(frozen=True, slots=True)
class Params:
    hold_seconds: float = 600.0
    """Application-class XIDs stay reported 10 min after the last occurrence: long enough for
    the job's restart to show whether it recurs, short enough not to linger."""
    repeat_warning: int = 2
    """RESTART_APP codes (13, 31, ...) repeating on one GPU within an episode point at the GPU
    rather than the app (NVIDIA: repeats -> diag): warning from this many occurrences."""
    max_age_intervals: float = 2.5
    """Gauge samples older than this many scrape intervals are not read (lost GPU territory)."""


State = GpuCycleState


_SPEC = {
    "code": (np.float32, np.nan),
    "onset": (np.float64, np.nan),
    "last_event": (np.float64, np.nan),
    "events": (np.float32, 0.0),
    "count": (np.float32, np.nan),
    # 1 once the episode has an occurrence gpufleet saw happen (not only held at first sight)
    "watched": (np.float32, 0.0),
}


def detect(
    snapshot: FleetSnapshot, state: State | None, now: float, params: Params
) -> tuple[list[Finding], State]:
    g = snapshot.gpus
    interval = scrape_interval(snapshot)
    max_age = params.max_age_intervals * interval
    cur = align(state.gpus if state else None, gpu_keys(snapshot), _SPEC)
    gauge = value(snapshot, XID, now, max_age)
    if gauge is None:
        return [], State(cur, now)
    code = np.where(np.isnan(gauge), cur["code"], gauge).astype(np.float32)
    prev = cur["code"]
    known = ~np.isnan(prev)
    nonzero = ~np.isnan(gauge) & (gauge > 0)
    idx = np.clip(np.nan_to_num(code, nan=0.0).astype(np.int64), 0, _TABLE_SIZE - 1)
    sev_rank = np.where(code >= _TABLE_SIZE, Severity.WARNING.rank, _SEVERITY[idx])
    unknown = ~np.isin(np.nan_to_num(code, nan=0.0).astype(np.int64), _KNOWN_CODES)
    changed = nonzero & known & (gauge != prev)
    # Cold start: a critical (or unknown) code already held in the gauge when gpufleet first
    # sees the GPU is reported, marked pre-existing; other classes held then are old news.
    cold = nonzero & ~known & ((sev_rank == Severity.CRITICAL.rank) | unknown)
    new_events = (changed | cold).astype(np.float32)
    seen_happen = changed.copy()
    # dcgm-exporter's DCGM_EXP_XID_ERRORS_COUNT is a gauge: XIDs within its last window
    # (--xid-count-window-size, 5 min). A rise is a new XID, even of the same code; a count
    # on first sight is a recent XID whatever its class.
    count = value(snapshot, XID_COUNT_METRIC, now, max_age)
    prev_count = cur["count"]
    if count is not None:
        rise = np.where(np.isnan(prev_count), count, count - prev_count)
        rise = np.where(nonzero & ~np.isnan(rise) & (rise > 0), rise, 0.0).astype(np.float32)
        new_events = np.maximum(new_events, rise)
        seen_happen |= (rise > 0) & ~np.isnan(prev_count)  # a first count predates gpufleet
        prev_count = np.where(np.isnan(count), prev_count, count).astype(np.float32)
    event = new_events > 0
    last_event = np.where(event, now, cur["last_event"])
    held_critical = nonzero & (sev_rank == Severity.CRITICAL.rank) & ~np.isnan(last_event)
    recent = (now - last_event) <= params.hold_seconds
    active = nonzero & (held_critical | recent)
    was_active = ~np.isnan(cur["onset"])
    events = np.where(active, np.where(was_active, cur["events"], 0.0) + new_events, 0.0)
    if count is not None:
        events = np.where(active, np.fmax(events, np.nan_to_num(count, nan=0.0)), events)
    onset = np.where(active, np.where(was_active, cur["onset"], now), np.nan)
    prior_watched = np.where(was_active, cur["watched"], 0.0) > 0
    watched = active & (prior_watched | seen_happen)
    repeat = events >= params.repeat_warning
    sev_rank = np.where(repeat & (sev_rank == Severity.INFO.rank), Severity.WARNING.rank, sev_rank)
    # IGNORE-class codes stay info even when they repeat (NVIDIA: no action).
    findings: list[Finding] = []
    for i in np.flatnonzero(active):
        c = int(code[i])
        info = xid_info(c)
        sev = _BY_RANK[int(sev_rank[i])]
        if info.action == XidAction.IGNORE:
            sev = Severity.INFO
        node = node_name(snapshot, int(g.node_index[i]))
        ctx = gpu_context(snapshot, int(i))
        n = round(float(events[i]))
        pre_existing = not bool(watched[i])
        is_unknown = bool(unknown[i])
        notes = [UNKNOWN_NOTE] if is_unknown else []
        notes += [PRE_EXISTING_NOTE] if pre_existing else []
        findings.append(
            Finding(
                kind=FindingKind.GPU_XID,
                severity=sev,
                summary=f"XID {c} ({info.name}) on GPU {g.device_index[i]} of {node}"
                + (f", {n} occurrences" if n > 1 else "")
                + (f" ({'; '.join(notes)})" if notes else ""),
                first_seen=float(onset[i]),
                last_seen=now,
                node=node,
                gpu_uuid=str(g.uuid[i]),
                evidence={
                    **ctx,
                    "xid": c,
                    "xid_name": info.name,
                    "nvidia_action": info.action.value,
                    "hardware": info.hardware,
                    "occurrences": n,
                    "last_occurrence": float(last_event[i]),
                    "note": UNKNOWN_NOTE if is_unknown else info.note,
                    "unknown_xid": is_unknown,
                    "pre_existing": PRE_EXISTING_NOTE if pre_existing else None,
                },
                recommended_action=(
                    f"look the code up ({UNKNOWN_NOTE}) and decide"
                    if is_unknown
                    else ACTION_TEXT.get(info.action, info.action.value)
                ),
                pre_existing=pre_existing,
            )
        )
    new = cur.replace(
        code=code,
        onset=onset,
        last_event=last_event,
        events=events,
        count=prev_count,
        watched=watched.astype(np.float32),
    )
    return findings, State(new, now)


NEEDS = Needs(
    ((XID,),),
    (XID, XID_COUNT_METRIC),
    {XID_COUNT_METRIC: "last-XID gauge only: a repeat of the same code is invisible"},
    {XID_COUNT_METRIC: ()},
)
"""The fields this detector reads, for detectors.coverage: what it needs to run at all,
what full evidence is, and what it infers from when a field is missing."""


SPEC = DetectorSpec(
    needs=NEEDS,
    name="gpu_xid",
    params_type=Params,
    detect=detect,
    kinds=(FindingKind.GPU_XID,),
    severities=(Severity.CRITICAL, Severity.WARNING, Severity.INFO),
    doc="XID codes with NVIDIA's action; repeats via gauge changes and the XID counter.",
)
