"""Gates: small pure checks that stand between a plan and the cluster, each with its reason.

Every gate takes what it needs (settings, the plan, a ledger of what gpufleet is doing, `now`) and
returns a `GateResult`; none reads a clock or a database. When in doubt the answer is "no, and tell
a person". The checklist comes from tools that made things worse: reset loops (NVSentinel #1543),
restart loops (robusta #551), stale replays acting after a restart or a breaker reset (#1280,
#450), a breaker whose denominator counted non-GPU nodes (#1228), undoing someone else's cordon
(#1424), nodes returned to service without validation (#1427).
"""

from __future__ import annotations

import math
from bisect import bisect_right, insort
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from zoneinfo import ZoneInfo

from remediations.cluster_view import ClusterView
from remediations.playbooks import Plan
from remediations.playbooks.replacement import NAME as MARK
from remediations.policy import Attempts, BlastRadius, Gates, MaintenanceWindows, Protected
from remediations.store.records import EngineState
from remediations.types import QUARANTINE_LABEL, QUARANTINE_TAINT


class Outcome(StrEnum):
    PASS = "pass"
    DENY = "deny"
    WAIT = "wait"
    """Not now (budget, window, pause): ask again later."""
    ESCALATE = "escalate"
    """Automation has done what it may: a person must look."""


@dataclass(frozen=True, slots=True)
class GateResult:
    gate: str
    outcome: Outcome
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.PASS


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pass(gate: str, reason: str = "") -> GateResult:
    return GateResult(gate, Outcome.PASS, reason)


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One action gpufleet took or is taking (what the rate, cooldown and radius gates count)."""

    playbook: str
    target: str
    at: float
    nodes: tuple[str, ...] = ()
    disruptive: bool = False
    active: bool = True
    """Still holds its nodes (in flight, or done and not undone while its incident is open)."""
    from_intake: bool = False
    """For an incident made from delivered alerts: its nodes count on the intake's budget."""
    settled: float | None = None
    """When the cooldown before the next attempt on the target starts (None: `at`): a failed
    attempt's end."""


def _holds(e: LedgerEntry) -> tuple[str, ...]:
    return e.nodes if e.active and e.disruptive else ()


@dataclass(frozen=True, slots=True)
class Ledger:
    entries: tuple[LedgerEntry, ...] = ()
    by_target: Mapping[tuple[str, str], tuple[float, ...]] = field(default_factory=dict)
    times: tuple[float, ...] = ()
    """Every entry's time, sorted (for the rate gate)."""
    held: frozenset[str] = frozenset()
    """Nodes held unavailable by active disruptive entries (the detectors' budget)."""
    held_intake: frozenset[str] = frozenset()
    """...and by entries for alert-derived incidents (the intake's own budget)."""
    intake_nodes: frozenset[str] = frozenset()
    """Nodes a disruptive action for an alert-derived incident took (in flight or done): while
    the cluster shows them unavailable, they count on the intake's budget, not the detectors'."""

    @staticmethod
    def of(entries: Iterable[LedgerEntry]) -> Ledger:
        es = tuple(entries)
        idx: dict[tuple[str, str], list[float]] = {}
        for e in es:
            idx.setdefault((e.playbook, e.target), []).append(
                e.at if e.settled is None else e.settled
            )
        return Ledger(
            es,
            {k: tuple(sorted(v)) for k, v in idx.items()},
            tuple(sorted(e.at for e in es)),
            frozenset(n for e in es if not e.from_intake for n in _holds(e)),
            frozenset(n for e in es if e.from_intake for n in _holds(e)),
            frozenset(n for e in es if e.from_intake and e.disruptive for n in e.nodes),
        )

    def add(self, entry: LedgerEntry) -> Ledger:
        """A new ledger with `entry` (the engine adds what it decides within one cycle)."""
        key = (entry.playbook, entry.target)
        by_target = dict(self.by_target)
        when = entry.at if entry.settled is None else entry.settled
        by_target[key] = tuple(sorted((*by_target.get(key, ()), when)))
        times = list(self.times)
        insort(times, entry.at)
        held, intake, took = self.held, self.held_intake, self.intake_nodes
        if entry.from_intake:
            intake = intake | frozenset(_holds(entry))
            took = took | frozenset(entry.nodes if entry.disruptive else ())
        else:
            held = held | frozenset(_holds(entry))
        return Ledger((*self.entries, entry), by_target, tuple(times), held, intake, took)

    def held_nodes(self) -> frozenset[str]:
        return self.held


def paused(state: EngineState) -> GateResult:
    if state.paused:
        who = f" by {state.paused_by}" if state.paused_by else ""
        return GateResult("pause", Outcome.WAIT, f"automation paused{who}: {state.paused_reason}")
    return _pass("pause")


def breaker(state: EngineState) -> GateResult:
    if state.breaker_tripped:
        return GateResult(
            "breaker",
            Outcome.DENY,
            f"circuit breaker tripped ({state.breaker_reason}); a person must reset it",
        )
    return _pass("breaker")


def evidence(kind: str) -> GateResult:
    if kind == "monitoring_gap":
        return GateResult("evidence", Outcome.DENY, "missing telemetry is never evidence")
    return _pass("evidence")


def freshness(
    last_seen: float, now: float, stale_after: float, not_before: float | None
) -> GateResult:
    """Stale or replayed findings never act: too old, or older than the engine's start or the
    last breaker reset."""
    if now - last_seen > stale_after:
        return GateResult(
            "freshness", Outcome.DENY, f"finding last seen {now - last_seen:.0f}s ago (stale)"
        )
    if not_before is not None and last_seen < not_before:
        return GateResult(
            "freshness", Outcome.DENY, "finding predates engine start or breaker reset (replay)"
        )
    return _pass("freshness")


def in_window(mw: MaintenanceWindows, playbook: str, now: float) -> GateResult:
    if playbook not in mw.applies_to or not mw.windows:
        return _pass("maintenance")
    for w in mw.windows:
        local = datetime.fromtimestamp(now, ZoneInfo(w.timezone))
        minute = local.hour * 60 + local.minute
        start, end = w.minutes()
        days = {d.weekday for d in w.days}
        if start <= end:
            if local.weekday() in days and start <= minute < end:
                return _pass("maintenance", "inside maintenance window")
        else:  # wraps past midnight: the part after midnight belongs to the previous day
            if local.weekday() in days and minute >= start:
                return _pass("maintenance", "inside maintenance window")
            if (local.weekday() - 1) % 7 in days and minute < end:
                return _pass("maintenance", "inside maintenance window")
    return GateResult("maintenance", Outcome.WAIT, f"{playbook} only runs in maintenance windows")


def protected(p: Protected, plan: Plan, view: ClusterView) -> GateResult:
    for n in plan.target_nodes:
        node = view.nodes.get(n)
        if node is not None:
            for k, v in p.node_labels.items():
                if node.labels.get(k) == v:
                    return GateResult("protected", Outcome.DENY, f"node {n} is protected ({k}={v})")
    for ns in plan.namespaces:
        if p.namespace(ns):
            return GateResult("protected", Outcome.DENY, f"namespace {ns} is protected")
    for pc in plan.priority_classes:
        if pc in p.priority_classes:
            return GateResult("protected", Outcome.DENY, f"priority class {pc} is protected")
    return _pass("protected")


def ownership(plan: Plan) -> GateResult:
    if plan.undo and not plan.owned:
        return GateResult(
            "ownership", Outcome.DENY, f"{plan.target} was not changed by gpufleet; not undoing"
        )
    return _pass("ownership")


def returns_to_service(plan: Plan) -> bool:
    """Whether the plan takes back one of gpufleet's own fences: deletes a DeviceTaintRule,
    uncordons, or removes the quarantine taint or label."""
    for i in plan.intents:
        if i.op in ("unfence_device", "uncordon"):
            return True
        if i.op == "untaint" and i.args.get("key") == QUARANTINE_TAINT:
            return True
        if i.op == "unlabel" and QUARANTINE_LABEL in (i.args.get("keys") or ()):
            return True
    return False


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """One journaled diagnostic verdict on a node or GPU (`passed`, `failed`, or `waived` by a
    person who vouches for it)."""

    subject: str
    """`node/<name>` or `gpu/<uuid>`."""
    outcome: str
    at: float
    by: str = ""
    note: str = ""


@dataclass(frozen=True, slots=True)
class Validation:
    """What the validation gate weighs for one plan's target, read from the journal."""

    changed_at: float | None
    """The latest thing gpufleet did to the target (fence, quarantine, drain, reset, reboot, a
    replacement mark): a diagnostic must come after it."""
    changed_by: str = ""
    latest: Diagnosis | None = None
    """The newest diagnostic that covers the target (a node's covers each of its GPUs)."""
    open_faults: tuple[str, ...] = ()
    """Open warning or critical hardware incidents on the target (a GPU's own and its node's;
    a node's and every one of its GPUs'), described for the journal."""
    fault_seen_at: float | None = None
    """When a hardware fault on the target was last seen (any incident, open or resolved)."""
    quiet: float = 0.0
    """How long the fault's own signals must have been quiet before a return (seconds)."""
    at: float = 0.0
    """When the gate looks (the journal's clock)."""
    lemon: str = ""
    """Why the target is a lemon (faulted again soon after each repair), or ''."""


def validated(plan: Plan, v: Validation | None) -> GateResult:
    """The one return-to-service rule (#1427): a GPU or node goes back only when a diagnostic
    passed after gpufleet's latest change to it, no warning or critical hardware incident on it
    is open, and its fault's signals have been quiet for `quiet`; a person's journaled waiver
    stands for all three (they vouch for the hardware). Anything else is refused, saying which
    condition it waits on."""
    if not returns_to_service(plan):
        return _pass("validation")
    if v is None or v.latest is None:
        return GateResult(
            "validation",
            Outcome.DENY,
            f"{plan.target}: no diagnostic has passed; a diagnostic must pass before it "
            "returns to service",
        )
    d = v.latest
    if v.changed_at is not None and d.at <= v.changed_at:
        return GateResult(
            "validation",
            Outcome.DENY,
            f"{plan.target}: no diagnostic has passed since {v.changed_by or 'its last change'} "
            f"at {_utc(v.changed_at)} (the latest, {d.outcome} on {d.subject} at {_utc(d.at)}, "
            "predates it)",
        )
    if d.outcome == "waived":
        return _pass("validation", f"diagnostic waived by {d.by} at {_utc(d.at)}: {d.note}")
    if v.lemon:
        return GateResult("validation", Outcome.DENY, v.lemon)
    if d.outcome != "passed":
        return GateResult(
            "validation",
            Outcome.DENY,
            f"{plan.target}: the latest diagnostic {d.outcome} at {_utc(d.at)} on {d.subject}; "
            "it stays out of service",
        )
    if v.open_faults:
        return GateResult(
            "validation",
            Outcome.DENY,
            f"{plan.target}: waits for its open hardware incident(s) to close "
            f"({'; '.join(v.open_faults)}); a passed diagnostic alone does not return it",
        )
    if v.fault_seen_at is not None and v.at - v.fault_seen_at < v.quiet:
        return GateResult(
            "validation",
            Outcome.DENY,
            f"{plan.target}: waits for its fault signals to stay quiet for {v.quiet:.0f}s "
            f"(last seen at {_utc(v.fault_seen_at)}, quiet from "
            f"{_utc(v.fault_seen_at + v.quiet)})",
        )
    return _pass("validation", f"diagnostic passed on {d.subject} at {_utc(d.at)}")


@dataclass(frozen=True, slots=True)
class Fleet:
    """Per-cycle index for the blast-radius gate: GPU nodes, pools, who is down already."""

    gpu_nodes: frozenset[str]
    unschedulable: frozenset[str]
    pool_of: Mapping[str, str]
    pool_size: Mapping[str, int]

    @staticmethod
    def of(view: ClusterView, pool_label: str) -> Fleet:
        gpu = [n for n in view.nodes.values() if n.is_gpu_node]
        pool_of = {n.name: n.labels.get(pool_label, "") for n in gpu}
        sizes: dict[str, int] = {}
        for p in pool_of.values():
            sizes[p] = sizes.get(p, 0) + 1
        return Fleet(
            frozenset(pool_of), frozenset(n.name for n in gpu if n.unschedulable), pool_of, sizes
        )


def blast_radius(
    br: BlastRadius, plan: Plan, fleet: Fleet, ledger: Ledger, from_intake: bool = False
) -> GateResult:
    """Most GPU nodes unavailable at once, absolute and per pool (GPU nodes only, #1228).

    The per-pool share never rounds below one node, or a small pool could never be repaired;
    `max_nodes: 0` forbids disruptive actions altogether. Alert-derived incidents have their
    own budget (`from_intake`, `br` = the policy's `intake.blast_radius`): what they hold never
    counts against the detectors' findings, and they count only what they hold themselves.
    """
    if not plan.disruptive:
        return _pass("blast_radius")
    if from_intake:
        down = ((fleet.unschedulable & ledger.intake_nodes) | ledger.held_intake) & fleet.gpu_nodes
    else:
        others = fleet.unschedulable - ledger.intake_nodes - ledger.held_intake
        down = others | (ledger.held_nodes() & fleet.gpu_nodes)
    new = [n for n in plan.target_nodes if n in fleet.gpu_nodes and n not in down]
    if not new:
        return _pass("blast_radius", "nodes already unavailable")
    after = down | set(new)
    whose = " by alert-derived incidents" if from_intake else ""
    if len(after) > br.max_nodes:
        return GateResult(
            "blast_radius",
            Outcome.WAIT,
            f"{len(after)} GPU nodes would be unavailable{whose} (max {br.max_nodes})",
        )
    for pool in {fleet.pool_of[n] for n in new}:
        size = fleet.pool_size[pool]
        allowed = max(1, math.floor(br.max_percent_of_pool * size / 100))
        count = sum(1 for n in after if fleet.pool_of.get(n) == pool)
        if count > allowed:
            return GateResult(
                "blast_radius",
                Outcome.WAIT,
                f"{count}/{size} GPU nodes of pool {pool or '(none)'} would be "
                f"unavailable (max {br.max_percent_of_pool:g}% = {allowed})",
            )
    return _pass("blast_radius")


def rate(max_per_hour: int, ledger: Ledger, now: float) -> GateResult:
    recent = bisect_right(ledger.times, now) - bisect_right(ledger.times, now - 3600.0)
    if recent >= max_per_hour:
        return GateResult(
            "rate", Outcome.WAIT, f"{recent} actions in the last hour (max {max_per_hour})"
        )
    return _pass("rate")


MARKS = frozenset({MARK})
"""Playbooks that only label what gpufleet already holds (remediations.playbooks.replacement):
they take nothing away, so the gates that pace new disruptions (attempts, cooldown, rate) never
hold them up behind the quarantine or fence they follow."""


def attempts(a: Attempts, playbook: str, target: str, ledger: Ledger, now: float) -> GateResult:
    if playbook in MARKS:
        return _pass("attempts")
    times = ledger.by_target.get((playbook, target), ())
    in_window = [t for t in times if now - a.window < t <= now]
    if len(in_window) >= a.max_attempts:
        return GateResult(
            "attempts",
            Outcome.ESCALATE,
            f"{len(in_window)} {playbook} attempts on {target} within {a.window:.0f}s "
            f"(max {a.max_attempts}): escalate to a person",
        )
    wait = a.wait_after(len(in_window))
    if times and now - times[-1] < wait:
        grown = f", backoff after {len(in_window)} attempts" if wait != a.cooldown else ""
        return GateResult(
            "cooldown",
            Outcome.WAIT,
            # Stated by its end, not by the time elapsed: the reason (and so the decision a
            # backtest reports) then stays the same for the whole cooldown.
            f"{playbook} on {target} is cooling down until {_utc(times[-1] + wait)} "
            f"({wait:.0f}s after the last attempt{grown})",
        )
    return _pass("attempts")


def static_gates(
    g: Gates,
    plan: Plan,
    view: ClusterView,
    kind: str,
    ledger: Ledger,
    now: float,
    last_seen: float,
    not_before: float | None,
) -> list[GateResult]:
    """What holds whatever the mode: evidence, freshness, protection, ownership, attempts."""
    return [
        evidence(kind),
        freshness(last_seen, now, g.stale_after, not_before),
        protected(g.protected, plan, view),
        ownership(plan),
        attempts(g.attempts, plan.playbook, plan.target, ledger, now),
    ]


def execution_gates(
    g: Gates,
    plan: Plan,
    fleet: Fleet,
    state: EngineState,
    ledger: Ledger,
    now: float,
    intake_radius: BlastRadius | None = None,
) -> list[GateResult]:
    """What must hold at the moment of acting: pause, breaker, window, radius, rate.
    `intake_radius`: the plan is for an alert-derived incident, on the intake's own budget."""
    if intake_radius is not None:
        radius = blast_radius(intake_radius, plan, fleet, ledger, from_intake=True)
    else:
        radius = blast_radius(g.blast_radius, plan, fleet, ledger)
    return [
        paused(state),
        breaker(state),
        in_window(g.maintenance, plan.playbook, now),
        radius,
        _pass("rate") if plan.playbook in MARKS else rate(g.rate.max_actions_per_hour, ledger, now),
    ]


def first_failure(results: Iterable[GateResult]) -> GateResult | None:
    for r in results:
        if not r.ok:
            return r
    return None
