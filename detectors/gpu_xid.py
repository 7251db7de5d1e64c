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

from collections.abc import Iterable
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from detectors.base import DetectorSpec, Needs, gpu_context, node_name
from detectors.findings import PRE_EXISTING_NOTE, Finding, FindingKind, Severity
from detectors.signals import XID, scrape_interval, value
from detectors.state import GpuCycleState, KeyedArrays, align, gpu_keys
from observer.fleet.catalog import (
    XID_COUNT_METRIC,
    XID_FOLLOWERS,
    XIDS,
    XidAction,
    xid_column_code,
    xid_info,
)
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
    "gauge": (np.float32, np.nan),
    "code": (np.float32, np.nan),
    "onset": (np.float64, np.nan),
    "last_event": (np.float64, np.nan),
    "events": (np.float32, 0.0),
    "count": (np.float32, np.nan),
    # 1 once the episode has an occurrence gpufleet saw happen (not only held at first sight)
    "watched": (np.float32, 0.0),
}
_CODE_COL = "count:"
FOLLOWER_NOTE = (
    "XID {code} usually follows another XID ({leaders}) that the last-XID gauge no longer "
    "shows; turn on DCGM_EXP_XID_ERRORS_COUNT or read the node's kernel log for the first one"
)


def _severity_of(codes: np.ndarray) -> np.ndarray:
    """Severity rank of plain occurrences per (integer) code; codes past the table: warning."""
    out: np.ndarray = np.where(
        codes >= _TABLE_SIZE, Severity.WARNING.rank, _SEVERITY[np.clip(codes, 0, _TABLE_SIZE - 1)]
    )
    return out


def _rank(codes: np.ndarray) -> np.ndarray:
    """Which code of a GPU's XIDs names the fault: the most severe, and of equal severity
    a code that follows no other (43/45 never hide the 48, 95 or 13 they follow)."""
    c = np.nan_to_num(codes, nan=0.0).astype(np.int64)
    sev = _severity_of(c)
    follower = np.isin(c, _FOLLOWER_CODES)
    out: np.ndarray = np.where(np.isnan(codes), -1, 2 * sev.astype(np.int64) + ~follower)
    return out


_FOLLOWER_CODES = np.array(sorted(XID_FOLLOWERS), dtype=np.int64)


def _code_counts(
    snapshot: FleetSnapshot, now: float, max_age: float, gauge: np.ndarray
) -> tuple[dict[int, np.ndarray], np.ndarray | None]:
    """Code -> per-GPU count within the exporter's window, and the total (None: the count is
    not collected). Per-code columns when the collector kept the `xid` label; otherwise the
    total is read as the count of the code the gauge shows."""
    total = value(snapshot, XID_COUNT_METRIC, now, max_age)
    if total is None:
        return {}, None
    reporting = ~np.isnan(total)
    out: dict[int, np.ndarray] = {}
    for name in snapshot.metrics:
        code = xid_column_code(name)
        if code is None:
            continue
        col = value(snapshot, name, now, max_age)
        if col is not None:
            out[code] = np.where(reporting, np.nan_to_num(col, nan=0.0), np.nan)
    if out:
        return out, total
    shown = ~np.isnan(gauge) & (gauge > 0)
    for code in np.unique(gauge[shown]).astype(np.int64).tolist():
        out[code] = np.where(gauge == code, total, np.where(reporting, 0.0, np.nan))
    return out, total


def detect(
    snapshot: FleetSnapshot, state: State | None, now: float, params: Params
) -> tuple[list[Finding], State]:
    interval = scrape_interval(snapshot)
    max_age = params.max_age_intervals * interval
    keys = gpu_keys(snapshot)
    prev_codes = [] if state is None else [c for c in state.gpus.cols if c.startswith(_CODE_COL)]
    spec = {**_SPEC, **{c: (np.float32, np.nan) for c in prev_codes}}
    cur = align(state.gpus if state else None, keys, spec)
    gauge = value(snapshot, XID, now, max_age)
    if gauge is None:
        return [], State(cur, now)
    n = len(keys)
    prev_gauge = cur["gauge"]
    known = ~np.isnan(prev_gauge)
    nonzero = ~np.isnan(gauge) & (gauge > 0)
    # Occurrences this cycle, per code: rises of the code's count within the exporter's window
    # (a count on first sight is a recent XID whatever its class, not one gpufleet saw happen),
    # and a change of the last-XID gauge. A gauge value unchanged since the last look (or since
    # the exporter restarted, which empties it) is not new evidence.
    counts, total = _code_counts(snapshot, now, max_age, gauge)
    prev_total = cur["count"]
    new, seen_happen, cols = _count_rises(cur, counts, total, prev_codes, n)
    seen_happen |= _gauge_changes(gauge, prev_gauge, known, nonzero, new, n)
    ep = _episodes(cur, new, counts, nonzero, seen_happen, now, params, n)
    # Without the per-code count, a follower in the gauge may hide the XID it followed: the
    # finding says so (the leading ECC XIDs also show in gpu_memory's remapped-row counters).
    gauge_only = total is None
    instances = _mig_instances(snapshot, ep.active)
    findings: list[Finding] = []
    reported: set[str] = set()
    for i in np.flatnonzero(ep.active):
        uuid = str(snapshot.gpus.uuid[i])
        if uuid in reported:
            continue
        reported.add(uuid)
        findings.append(
            _finding(snapshot, int(i), ep, counts, gauge, gauge_only, instances.get(uuid), now)
        )
    prev_total = prev_total if total is None else np.where(np.isnan(total), prev_total, total)
    base = {
        "gauge": np.where(np.isnan(gauge), prev_gauge, gauge).astype(np.float32),
        "code": np.where(ep.active, ep.code, np.nan).astype(np.float32),
        "onset": ep.onset,
        "last_event": ep.last_event,
        "events": ep.events.astype(np.float32),
        "count": prev_total.astype(np.float32),
        "watched": ep.watched.astype(np.float32),
    }
    return findings, State(KeyedArrays(keys, MappingProxyType({**base, **cols})), now)


def _count_rises(
    cur: KeyedArrays,
    counts: dict[int, np.ndarray],
    total: np.ndarray | None,
    prev_codes: list[str],
    n: int,
) -> tuple[dict[int, np.ndarray], np.ndarray, dict[str, np.ndarray]]:
    """Per code the rise of its count since the last look; which GPUs gpufleet saw an XID
    happen on (a count on first sight is not that); the per-code counts to keep."""
    prev_total = cur["count"]
    new: dict[int, np.ndarray] = {}
    seen_happen = np.zeros(n, dtype=bool)
    cols: dict[str, np.ndarray] = {}
    for code, cnt in counts.items():
        name = f"{_CODE_COL}{code}"
        prev = cur[name] if name in cur.cols else np.where(np.isnan(prev_total), np.nan, 0.0)
        rise = np.where(np.isnan(prev), cnt, cnt - prev)
        hit = ~np.isnan(cnt) & ~np.isnan(rise) & (rise > 0)
        new[code] = np.where(hit, rise, 0.0)
        seen_happen |= hit & ~np.isnan(prev)
        kept = np.where(np.isnan(cnt), prev, cnt).astype(np.float32)
        if bool(np.any(kept > 0)):
            cols[name] = kept
    unknown_count = np.ones(n, dtype=bool) if total is None else np.isnan(total)
    for name in prev_codes:  # codes no longer counted: 0 where the count is known, else kept
        if name not in cols and name not in {f"{_CODE_COL}{c}" for c in counts}:
            kept = np.where(unknown_count, cur[name], 0.0).astype(np.float32)
            if bool(np.any(kept > 0)):
                cols[name] = kept
    return new, seen_happen, cols


def _gauge_changes(
    gauge: np.ndarray,
    prev_gauge: np.ndarray,
    known: np.ndarray,
    nonzero: np.ndarray,
    new: dict[int, np.ndarray],
    n: int,
) -> np.ndarray:
    """Add the last-XID gauge's changes (and cold-start criticals) to `new`; returns where the
    gauge changed (an XID gpufleet saw happen)."""
    changed: np.ndarray = nonzero & known & (gauge != prev_gauge)
    g_code = np.nan_to_num(gauge, nan=0.0).astype(np.int64)
    unknown_g = ~np.isin(g_code, _KNOWN_CODES)
    sev_g = np.where(
        g_code >= _TABLE_SIZE, Severity.WARNING.rank, _SEVERITY[np.clip(g_code, 0, 255)]
    )
    # Cold start: a critical (or unknown) code already held in the gauge when gpufleet first
    # sees the GPU is reported, marked pre-existing; other classes held then are old news.
    cold = nonzero & ~known & ((sev_g == Severity.CRITICAL.rank) | unknown_g)
    for code in np.unique(g_code[changed | cold]).tolist():
        mine = (changed | cold) & (g_code == code)
        new[code] = np.maximum(new.get(code, np.zeros(n)), mine.astype(np.float64))
    return changed


@dataclass(frozen=True, slots=True)
class _Episodes:
    """Per GPU its XID episode after this cycle: code, severity, occurrences, since when."""

    code: np.ndarray
    last_event: np.ndarray
    sev_rank: np.ndarray
    unknown: np.ndarray
    active: np.ndarray
    events: np.ndarray
    onset: np.ndarray
    watched: np.ndarray


def _episodes(
    cur: KeyedArrays,
    new: dict[int, np.ndarray],
    counts: dict[int, np.ndarray],
    nonzero: np.ndarray,
    seen_happen: np.ndarray,
    now: float,
    params: Params,
    n: int,
) -> _Episodes:
    """Carry each GPU's episode forward: the highest-ranked code wins, critical codes held in
    the gauge stay active, others while recent; repeats raise info to warning."""
    # The cycle's code per GPU: the highest-ranked code with an occurrence.
    # A code's rank is one number; the best code's rank is carried beside it (_rank per GPU).
    best = np.full(n, np.nan)
    best_rank = _rank(best)
    for code, k in new.items():
        code_rank = _rank(np.array([float(code)]))
        better = (k > 0) & (code_rank > best_rank)
        best = np.where(better, float(code), best)
        best_rank = np.where(better, code_rank, best_rank)
    event = ~np.isnan(best)
    was_active = ~np.isnan(cur["onset"])
    ep_code = np.where(was_active, cur["code"], np.nan)
    ep_code = np.where(event & (best_rank > _rank(ep_code)), best, ep_code).astype(np.float32)
    last_event = np.where(event, now, cur["last_event"])
    code_i = np.nan_to_num(ep_code, nan=0.0).astype(np.int64)
    sev_rank = np.where(
        code_i >= _TABLE_SIZE, Severity.WARNING.rank, _SEVERITY[np.clip(code_i, 0, 255)]
    )
    unknown = ~np.isin(code_i, _KNOWN_CODES)
    held_critical = nonzero & (sev_rank == Severity.CRITICAL.rank) & ~np.isnan(last_event)
    recent = (now - last_event) <= params.hold_seconds
    active = nonzero & ~np.isnan(ep_code) & (held_critical | recent)
    same = was_active & (cur["code"] == ep_code)
    mine_new = np.zeros(n)
    mine_count = np.zeros(n)
    for code, k in new.items():
        mine_new = np.where(code_i == code, k, mine_new)
    for code, cnt in counts.items():
        mine_count = np.where(code_i == code, np.nan_to_num(cnt, nan=0.0), mine_count)
    events = np.where(active, np.where(same, cur["events"], 0.0) + mine_new, 0.0)
    events = np.where(active, np.fmax(events, mine_count), events)
    onset = np.where(active, np.where(was_active, cur["onset"], now), np.nan)
    prior_watched = np.where(was_active, cur["watched"], 0.0) > 0
    watched = active & (prior_watched | seen_happen)
    repeat = events >= params.repeat_warning
    sev_rank = np.where(repeat & (sev_rank == Severity.INFO.rank), Severity.WARNING.rank, sev_rank)
    return _Episodes(ep_code, last_event, sev_rank, unknown, active, events, onset, watched)


def _mig_instances(snapshot: FleetSnapshot, active: np.ndarray) -> dict[str, list[str]]:
    """MIG (flex mode): XIDs are device fields, repeated on every instance's row. One finding
    per physical GPU, its instances as evidence."""
    g = snapshot.gpus
    instances: dict[str, list[str]] = {}
    for row in np.flatnonzero(active).tolist():
        if g.mig_instance[row]:
            instances.setdefault(str(g.uuid[row]), []).append(str(g.mig_instance[row]))
    return instances


def _finding(
    snapshot: FleetSnapshot,
    i: int,
    ep: _Episodes,
    counts: dict[int, np.ndarray],
    gauge: np.ndarray,
    gauge_only: bool,
    instances: list[str] | None,
    now: float,
) -> Finding:
    """GPU `i`'s XID finding: NVIDIA's name and action for the code, how often, since when."""
    g = snapshot.gpus
    uuid = str(g.uuid[i])
    c = int(ep.code[i])
    info = xid_info(c)
    sev = _BY_RANK[int(ep.sev_rank[i])]
    if info.action == XidAction.IGNORE:  # IGNORE-class codes stay info even when they repeat
        sev = Severity.INFO
    leaders = XID_FOLLOWERS.get(c) if gauge_only else None
    node = node_name(snapshot, int(g.node_index[i]))
    ctx = gpu_context(snapshot, int(i))
    occ = round(float(ep.events[i]))
    pre_existing = not bool(ep.watched[i])
    is_unknown = bool(ep.unknown[i])
    notes = [UNKNOWN_NOTE] if is_unknown else []
    notes += [PRE_EXISTING_NOTE] if pre_existing else []
    window = {str(k): int(cnt[i]) for k, cnt in sorted(counts.items()) if cnt[i] > 0}
    follower_note = _follower_note(c, leaders)
    return Finding(
        kind=FindingKind.GPU_XID,
        severity=sev,
        summary=f"XID {c} ({info.name}) on GPU {g.device_index[i]} of {node}"
        + (f", {occ} occurrences" if occ > 1 else "")
        + (f" ({'; '.join(notes)})" if notes else ""),
        first_seen=float(ep.onset[i]),
        last_seen=now,
        node=node,
        gpu_uuid=uuid,
        evidence={
            **ctx,
            "xid": c,
            "xid_name": info.name,
            "nvidia_action": info.action.value,
            "hardware": info.hardware,
            "occurrences": occ,
            "last_occurrence": float(ep.last_event[i]),
            "xids_in_window": window,
            "last_xid_gauge": int(gauge[i]),
            "note": UNKNOWN_NOTE if is_unknown else (follower_note or info.note),
            "unknown_xid": is_unknown,
            "pre_existing": PRE_EXISTING_NOTE if pre_existing else None,
            **({"mig_instances": sorted(instances)} if instances is not None else {}),
        },
        recommended_action=(
            f"look the code up ({UNKNOWN_NOTE}) and decide"
            if is_unknown
            else ACTION_TEXT.get(info.action, info.action.value)
        ),
        pre_existing=pre_existing,
    )


def _follower_note(code: int, leaders: Iterable[int] | None) -> str | None:
    """Seen in the gauge only, a follower code may hide the XID it followed: say which."""
    if not leaders:
        return None
    return FOLLOWER_NOTE.format(code=code, leaders=", ".join(map(str, sorted(leaders))))


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
