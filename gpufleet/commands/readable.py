"""Journal records as a person reads them in a terminal: times in UTC with their age, the plan
step by step with where the action stands, the audit trail in order. `--json` keeps the raw
records for scripts; this is the default view of `actions show` and `incidents show`."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from remediations.store import ActionRecord, AuditRecord, IncidentRecord


def when(t: float | None, now: float | None = None) -> str:
    """`2026-12-03 11:56:54 UTC (3m ago)`; `-` for no time."""
    if t is None:
        return "-"
    stamp = datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{stamp} ({age(t, time.time() if now is None else now)})"


def age(t: float, now: float) -> str:
    d = now - t
    if d < 0:
        return "in the future"
    if d < 90:
        return f"{d:.0f}s ago"
    if d < 5400:
        return f"{d / 60:.0f}m ago"
    if d < 129600:
        return f"{d / 3600:.1f}h ago"
    return f"{d / 86400:.1f}d ago"


def _fields(rows: Sequence[tuple[str, str]]) -> list[str]:
    width = max(len(k) for k, _ in rows)
    return [f"  {k + ':':<{width + 1}} {v}" for k, v in rows]


def trail(records: Sequence[AuditRecord], now: float | None = None) -> list[str]:
    if not records:
        return ["  (nothing recorded)"]
    n = time.time() if now is None else now
    out = []
    for r in records:
        stamp = datetime.fromtimestamp(r.at, UTC).strftime("%Y-%m-%d %H:%M:%S")
        out.append(f"  {stamp}  {r.kind:<11} {r.actor:<14} {r.message}  ({age(r.at, n)})")
    return out


def _args(args: Mapping[str, Any]) -> str:
    """`timeout=600.0 pods=[2 items]`: long lists are counted, not dumped (`--json` has them)."""

    def value(v: Any) -> str:
        if isinstance(v, list) and len(v) > 3:
            return f"[{len(v)} items]"
        return json.dumps(v)

    return " ".join(f"{k}={value(v)}" for k, v in args.items())


def readable(a: ActionRecord, records: Sequence[AuditRecord], now: float | None = None) -> str:
    """One action: what, why, who approved, each planned step (done / next / to do), trail."""
    rows = [
        ("state", a.state.value + (f" ({a.result})" if a.result else "")),
        ("playbook", f"{a.playbook} on {a.target}" + (" (disruptive)" if a.disruptive else "")),
        ("rule", f"{a.rule} (mode {a.mode.value})"),
        ("decision", f"{a.decision.value}: " + ("; ".join(a.reasons) or "-")),
        ("incident", a.incident_id),
        ("created", when(a.created_at, now)),
        ("updated", when(a.updated_at, now)),
        ("approved by", a.approved_by or "-"),
    ]
    if a.started_at is not None:
        rows.append(("started", when(a.started_at, now)))
    lines = [f"action {a.id}", *_fields(rows), "plan:"]
    for i, step in enumerate(a.plan):
        mark = "done" if i < a.progress else "next" if i == a.progress else "to do"
        lines.append(f"  {i + 1}. [{mark:>5}] {step.op} {step.target} {_args(step.args)}".rstrip())
    if not a.plan:
        lines.append("  (no steps)")
    return "\n".join([*lines, "audit trail:", *trail(records, now)])


def readable_incident(
    i: IncidentRecord, records: Sequence[AuditRecord], now: float | None = None
) -> str:
    """One incident: what, where, since when, the evidence, then what happened to it."""
    rows = [
        ("status", f"{i.status.value} · {i.severity}"),
        ("summary", i.summary),
        ("node", i.node or "-"),
        ("gpu", i.gpu_uuid or "-"),
        ("job", i.job or "-"),
        ("opened", when(i.opened_at, now)),
        ("last seen", when(i.last_seen, now)),
        ("resolved", when(i.resolved_at, now)),
        ("last decision", i.last_decision or "-"),
    ]
    lines = [f"incident {i.id} ({i.kind})", *_fields(rows), "evidence:"]
    ev = {k: v for k, v in i.evidence.items() if not isinstance(v, dict | list)}
    lines += _fields([(k, str(v)) for k, v in ev.items()]) if ev else ["  (none)"]
    return "\n".join([*lines, "what happened:", *trail(records, now)])
