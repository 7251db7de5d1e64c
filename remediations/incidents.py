"""Findings -> incidents: one incident per (kind, entity), opened and resolved with hysteresis.

A detector that flaps (NVSentinel #1447: power-throttle events at 10+/s) must not open and close
incidents, nor wake the engine, at its own rate. An incident opens after `open_after` consecutive
cycles with a finding (at once for critical), and resolves after `resolve_after` consecutive
healthy cycles. Missing telemetry is never evidence of health: while a node (or the fleet) has a
monitoring gap, its incidents neither count healthy cycles nor resolve.

`step` is pure: (state, findings, now) -> (state, changes). The engine persists the changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from detectors.findings import PRE_EXISTING_NOTE, Finding, FindingKind
from remediations.store.records import IncidentRecord
from remediations.types import IncidentId, IncidentStatus, stable_id


@dataclass(frozen=True, slots=True)
class Hysteresis:
    open_after: int = 2
    """Consecutive cycles with a finding before an incident opens (critical: at once)."""
    resolve_after: int = 3
    """Consecutive healthy cycles before an open incident resolves."""
    critical_opens_at_once: bool = True


COLD_START = "cold_start"
"""Evidence key a stored incident carries while its evidence predates the fleet's watch (so a
restarted or new leader keeps that judgement)."""
HOLDS = "holds_incidents"
"""Evidence key of a fleet-level monitoring_gap: False when one source of several fails (an
exporter of many, the Kubernetes API) and the rest of the fleet is still judged, so incidents
elsewhere may resolve; absent or True, no data holds every incident open."""
COVERAGE = "coverage"
"""`Finding.detector` of the notice that a detector cannot run (detectors.coverage)."""


def entity_key(f: Finding) -> str:
    key = f"{f.kind.value}|{f.node or ''}|{f.gpu_uuid or ''}|{f.job or ''}"
    return key + _coverage_suffix(f) if f.detector == COVERAGE else key


def _coverage_suffix(f: Finding) -> str:
    """A detector that cannot run is its own entity: a statement about the exporter's fields,
    never the fleet's telemetry gap (which holds every incident open while it lasts)."""
    about = f.evidence.get("coverage")
    return "|detector:" + str(about.get("detector", "") if isinstance(about, dict) else "")


@dataclass(frozen=True, slots=True)
class Tracked:
    """What the tracker remembers about one entity between cycles (compact on purpose)."""

    key: str
    kind: str
    node: str | None
    gpu_uuid: str | None
    job: str | None
    severity: str
    summary: str
    first_seen: float
    last_seen: float
    seen_cycles: int = 0
    healthy_cycles: int = 0
    incident_id: IncidentId | None = None
    """None while the entity is pending (seen, not yet opened)."""
    opened_at: float = 0.0
    evidence: Mapping[str, Any] = field(default_factory=dict)
    pre_existing: bool = False
    """Every finding this cycle carried evidence present before gpufleet started watching
    (`Finding.pre_existing`): the incident is reported but never acted on automatically."""


class Change(StrEnum):
    OPENED = "opened"
    UPDATED = "updated"
    RESOLVED = "resolved"


@dataclass(frozen=True, slots=True)
class IncidentChange:
    change: Change
    incident: IncidentRecord


@dataclass(frozen=True, slots=True)
class TrackerState:
    cluster: str
    entries: Mapping[str, Tracked] = field(default_factory=dict)

    def open(self) -> Iterable[Tracked]:
        return (t for t in self.entries.values() if t.incident_id is not None)

    @staticmethod
    def from_records(cluster: str, records: Iterable[IncidentRecord]) -> TrackerState:
        """Rebuild the open incidents after a restart (pending counters start again: safe)."""
        entries = {
            r.entity_key: Tracked(
                key=r.entity_key,
                kind=r.kind,
                node=r.node,
                gpu_uuid=r.gpu_uuid,
                job=r.job,
                severity=r.severity,
                summary=r.summary,
                first_seen=r.first_seen,
                last_seen=r.last_seen,
                seen_cycles=r.seen_cycles,
                healthy_cycles=r.healthy_cycles,
                incident_id=r.id,
                opened_at=r.opened_at,
                evidence=r.evidence,
                pre_existing=bool(r.evidence.get(COLD_START)),
            )
            for r in records
            if r.status is IncidentStatus.OPEN
        }
        return TrackerState(cluster, entries)


def record(cluster: str, t: Tracked, now: float, resolved: bool = False) -> IncidentRecord:
    assert t.incident_id is not None
    return IncidentRecord(
        id=t.incident_id,
        cluster=cluster,
        kind=t.kind,
        entity_key=t.key,
        node=t.node,
        gpu_uuid=t.gpu_uuid,
        job=t.job,
        status=IncidentStatus.RESOLVED if resolved else IncidentStatus.OPEN,
        severity=t.severity,
        summary=t.summary,
        opened_at=t.opened_at,
        updated_at=now,
        resolved_at=now if resolved else None,
        first_seen=t.first_seen,
        last_seen=t.last_seen,
        seen_cycles=t.seen_cycles,
        healthy_cycles=t.healthy_cycles,
        evidence={**t.evidence, COLD_START: True} if t.pre_existing else t.evidence,
    )


def cold_wording(summary: str, cold: bool, first_watched: float | None) -> str:
    """A detector's "present before gpufleet started" in the product's words: evidence held
    to be cold start was there before the fleet was first watched (at the journal's time);
    evidence a detector first saw after another replica had watched the fleet is not, and
    the note goes."""
    if PRE_EXISTING_NOTE not in summary:
        return summary
    if cold:
        at = "" if first_watched is None else f" at {_utc(first_watched)}"
        return summary.replace(
            PRE_EXISTING_NOTE, f"present before gpufleet first watched this fleet{at}"
        )
    for form in (f" ({PRE_EXISTING_NOTE})", f"; {PRE_EXISTING_NOTE}", f"{PRE_EXISTING_NOTE}; "):
        summary = summary.replace(form, "")
    return summary.replace(PRE_EXISTING_NOTE, "")


def _reworded(f: Finding, cold: bool, first_watched: float | None) -> Finding:
    """`f` with its summary and its evidence's `pre_existing` note in the product's words."""
    if PRE_EXISTING_NOTE not in f.summary and f.evidence.get("pre_existing") != PRE_EXISTING_NOTE:
        return f
    evidence = f.evidence
    if evidence.get("pre_existing") == PRE_EXISTING_NOTE:
        note = cold_wording(PRE_EXISTING_NOTE, cold, first_watched) or None
        evidence = {**evidence, "pre_existing": note}
    return replace(f, summary=cold_wording(f.summary, cold, first_watched), evidence=evidence)


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _worst(findings: Sequence[Finding]) -> Finding:
    return max(findings, key=lambda f: (f.severity.rank, f.last_seen))


HELD_EVIDENCE = frozenset({FindingKind.GPU_XID})
"""Kinds whose evidence a sticky source holds after the fault is fixed: dcgm-exporter's last-XID
gauge keeps its code until the exporter restarts, a GPU reset does not clear it."""


def answered(f: Finding, verdicts: Mapping[str, float]) -> bool:
    """The driver has had its say since this finding's last occurrence: a diagnostic passed (or
    a person waived it) on the GPU or its node after the XID, and no XID came since. Such a
    finding is no new evidence: its incident resolves and it opens none."""
    if f.kind not in HELD_EVIDENCE or f.gpu_uuid is None or f.gpu_uuid not in verdicts:
        return False
    last = f.evidence.get("last_occurrence")
    return isinstance(last, int | float) and float(last) < verdicts[f.gpu_uuid]


def step(
    state: TrackerState,
    findings: Sequence[Finding],
    now: float,
    params: Hysteresis = Hysteresis(),
    verdicts: Mapping[str, float] | None = None,
    watched_before: bool = False,
    first_watched: float | None = None,
) -> tuple[TrackerState, list[IncidentChange]]:
    """Advance one cycle. Returns the new state and the incidents opened, updated, resolved.
    `verdicts`: GPU UUID -> time of the latest passed (or waived) diagnostic covering it; held
    findings older than it count as absent (`answered`).

    Cold start is judged on the product's clock: an entity is pre-existing only if every
    finding says so and either it was tracked as pre-existing already (by this process or the
    leader before it) or it is new and nobody watched the fleet before this process looked
    (`watched_before` False). Summaries say so by the journal's clock (`cold_wording`, with
    `first_watched`, the fleet's first watch by any replica)."""
    if verdicts:
        findings = [f for f in findings if not answered(f, verdicts)]
    by_key, gaps = _group(findings)
    cluster = state.cluster
    entries: dict[str, Tracked] = {}
    changes: list[IncidentChange] = []
    for key, group in by_key.items():
        old = state.entries.get(key)
        t = _tracked(key, group, old, watched_before, first_watched)
        if t.incident_id is None:
            critical = t.severity == "critical" and params.critical_opens_at_once
            if critical or t.seen_cycles >= params.open_after:
                t = replace(
                    t, incident_id=IncidentId(stable_id(cluster, key, t.first_seen)), opened_at=now
                )
                changes.append(IncidentChange(Change.OPENED, record(cluster, t, now)))
        elif old is not None and (old.severity != t.severity or old.healthy_cycles > 0):
            changes.append(IncidentChange(Change.UPDATED, record(cluster, t, now)))
        entries[key] = t
    for key, old in state.entries.items():
        if key in by_key or old.incident_id is None:
            continue  # seen this cycle, or pending and not seen: the episode is over
        if gaps.covers(old):
            entries[key] = old  # no data is not evidence of health: hold
            continue
        t = replace(old, healthy_cycles=old.healthy_cycles + 1, seen_cycles=0)
        if t.healthy_cycles >= params.resolve_after:
            changes.append(IncidentChange(Change.RESOLVED, record(cluster, t, now, True)))
        else:
            entries[key] = t
    return TrackerState(cluster, entries), changes


@dataclass
class _Gaps:
    """Where this cycle saw no data: whole nodes, or (a scrape gap) the whole fleet."""

    nodes: set[str] = field(default_factory=set)
    fleet: bool = False

    def covers(self, t: Tracked) -> bool:
        """An incident here is held, not counted healthy: no data is not evidence of health."""
        return self.fleet or (t.node is not None and t.node in self.nodes)


def _group(findings: Sequence[Finding]) -> tuple[dict[str, list[Finding]], _Gaps]:
    """Findings per incident key (in first-seen order), and where monitoring saw nothing."""
    by_key: dict[str, list[Finding]] = {}
    gaps = _Gaps()
    gap_kind = FindingKind.MONITORING_GAP
    for f in findings:
        key = f"{f.kind.value}|{f.node or ''}|{f.gpu_uuid or ''}|{f.job or ''}"
        coverage = f.detector == COVERAGE
        if coverage:
            key += _coverage_suffix(f)
        if key in by_key:
            by_key[key].append(f)
        else:
            by_key[key] = [f]
        if f.kind is gap_kind and not coverage:
            if f.node is None:
                gaps.fleet = gaps.fleet or bool(f.evidence.get(HOLDS, True))
            else:
                gaps.nodes.add(f.node)
    return by_key, gaps


def _tracked(
    key: str,
    group: list[Finding],
    old: Tracked | None,
    watched_before: bool,
    first_watched: float | None,
) -> Tracked:
    """The entity's tracked state after this cycle's findings: its worst finding's severity and
    summary, the episode's first sighting kept, cold start judged as `step` says."""
    f = group[0] if len(group) == 1 else _worst(group)
    cold = f.pre_existing if len(group) == 1 else all(g.pre_existing for g in group)
    cold = cold and (old.pre_existing if old is not None else not watched_before)
    f = _reworded(f, cold, first_watched)
    sev = f.severity.value
    if old is None:
        first = f.first_seen if len(group) == 1 else min(g.first_seen for g in group)
        return Tracked(
            key,
            f.kind.value,
            f.node,
            f.gpu_uuid,
            f.job,
            sev,
            f.summary,
            first,
            f.last_seen,
            1,
            0,
            None,
            0.0,
            f.evidence,
            cold,
        )
    return Tracked(
        key,
        old.kind,
        old.node,
        old.gpu_uuid,
        old.job,
        sev,
        f.summary,
        old.first_seen,
        max(old.last_seen, f.last_seen),
        old.seen_cycles + 1,
        0,
        old.incident_id,
        old.opened_at,
        f.evidence,
        cold,
    )
