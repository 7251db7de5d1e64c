"""Score episodes (backtest output) against a scenario's ground truth: recall, precision, TTD.

Shared by the simulated suite and `gpufleet eval` (which backfills a real Prometheus first), so
both report the same numbers. Rules, chosen so that a number means what a person expects:
- A fault is *found* by an episode of its expected kind (truth `finding` or `also`) on its entity
  (GPU UUID for GPU faults and stragglers, job for hangs) that is detected between the fault's
  start and its end plus `grace_seconds`. Time to detect = detection time - fault start.
- Precision is over actionable episodes (warning and critical). An episode is a true positive
  when it concerns a fault's entity during the fault (whatever its kind: a DBE seen as gpu_xid
  and gpu_memory is two right findings, not one wrong one). `gpu_idle` is waste, not a fault,
  and is left out of precision (it is counted on its own).
- Time to detect is also reported net of *blind* time — seconds between the fault's start and
  its detection during which the fault could not be seen: a fleet-wide scrape gap, the
  exporter of one of its nodes down, and for stragglers the job's checkpoints and evaluation
  phases (every rank pauses or runs lighter work; the simulator applies the slowdown only to
  training steps).
- A false positive that overlaps a confounder (same node, job or fleet-wide, same time) is
  charged to that confounder's kind: the issue's target is zero of them.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from detectors.findings import Finding, FindingKind, Severity

UNSCORED = frozenset({FindingKind.GPU_IDLE})


@dataclass(frozen=True, slots=True)
class KindScore:
    faults: int = 0
    found: int = 0
    ttd: tuple[float, ...] = ()
    ttd_seen: tuple[float, ...] = ()
    """Time to detect net of blind time (see the module docstring)."""

    @property
    def recall(self) -> float:
        return self.found / self.faults if self.faults else 1.0

    @property
    def median_ttd(self) -> float | None:
        return statistics.median(self.ttd) if self.ttd else None

    @property
    def max_ttd_seen(self) -> float | None:
        return max(self.ttd_seen) if self.ttd_seen else None


@dataclass(frozen=True, slots=True)
class Score:
    per_fault_kind: Mapping[str, KindScore]
    actionable: int
    true_positive: int
    false_positives: tuple[Finding, ...]
    fp_by_confounder: Mapping[str, int]
    missed: tuple[str, ...]
    """Ids of faults no episode found."""
    info_episodes: int = 0
    unscored: Mapping[str, int] = field(default_factory=dict)

    @property
    def recall(self) -> float:
        faults = sum(k.faults for k in self.per_fault_kind.values())
        found = sum(k.found for k in self.per_fault_kind.values())
        return found / faults if faults else 1.0

    @property
    def precision(self) -> float:
        return self.true_positive / self.actionable if self.actionable else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "recall": round(self.recall, 4),
            "precision": round(self.precision, 4),
            "f1": round(self.f1, 4),
            "actionable_episodes": self.actionable,
            "true_positive_episodes": self.true_positive,
            "false_positives": [f.to_json() for f in self.false_positives],
            "false_positives_by_confounder": dict(self.fp_by_confounder),
            "missed_faults": list(self.missed),
            "info_episodes": self.info_episodes,
            "unscored_episodes": dict(self.unscored),
            "per_fault_kind": {
                k: {
                    "faults": v.faults,
                    "found": v.found,
                    "recall": round(v.recall, 4),
                    "median_ttd_s": v.median_ttd,
                    "max_ttd_s": max(v.ttd) if v.ttd else None,
                    "max_ttd_net_of_blind_s": v.max_ttd_seen,
                }
                for k, v in sorted(self.per_fault_kind.items())
            },
        }

    def table(self) -> str:
        rows = [
            f"{'fault kind':22} {'faults':>6} {'found':>6} {'recall':>7} {'median TTD':>11} "
            f"{'max TTD':>8} {'max net of blind':>17}"
        ]
        for k, v in sorted(self.per_fault_kind.items()):
            ttd = "-" if v.median_ttd is None else f"{v.median_ttd:.0f}s"
            worst = f"{max(v.ttd):.0f}s" if v.ttd else "-"
            seen = "-" if v.max_ttd_seen is None else f"{v.max_ttd_seen:.0f}s"
            rows.append(
                f"{k:22} {v.faults:6d} {v.found:6d} {v.recall:7.2f} {ttd:>11} {worst:>8} {seen:>17}"
            )
        rows.append(
            f"precision {self.precision:.3f}  recall {self.recall:.3f}  F1 {self.f1:.3f}  "
            f"({self.true_positive}/{self.actionable} actionable episodes right)"
        )
        fps = ", ".join(f"{k}: {n}" for k, n in sorted(self.fp_by_confounder.items())) or "none"
        rows.append(f"false positives by confounder: {fps}")
        return "\n".join(rows)


def _detected_at(f: Finding) -> float:
    return float(f.evidence.get("detected_at", f.first_seen))


def _on_entity(f: Finding, fault: Mapping[str, Any]) -> bool:
    if fault["kind"] == "nccl_hang":
        return f.job == fault["job"] and f.gpu_uuid is None
    return f.gpu_uuid is not None and f.gpu_uuid == fault.get("gpu_uuid")


def _concerns(f: Finding, fault: Mapping[str, Any], grace: float) -> bool:
    """The episode speaks about this fault's entity while the fault is on."""
    if not (f.last_seen >= fault["start"] and _detected_at(f) <= fault["end"] + grace):
        return False
    if _on_entity(f, fault):
        return True
    # A job-level finding about the faulty GPU's job, or a GPU finding on a hung job's GPUs.
    if fault["kind"] == "nccl_hang":
        return bool(f.job == fault["job"])
    return bool(f.job is not None and f.job == fault.get("job") and f.gpu_uuid is None)


def _hits_confounder(f: Finding, c: Mapping[str, Any], grace: float) -> bool:
    if f.last_seen < c["start"] or _detected_at(f) > c["end"] + grace:
        return False
    if c["kind"] == "scrape_gap" or (not c.get("nodes") and not c.get("job")):
        return True
    if c.get("job") and f.job == c["job"]:
        return True
    return bool(f.node is not None and f.node in (c.get("nodes") or [c.get("node")]))


def blind_seconds(
    fault: Mapping[str, Any], confounders: Sequence[Mapping[str, Any]], until: float
) -> float:
    """Seconds of [fault start, until] during which the fault could not be observed."""
    nodes = {fault.get("node"), *(fault.get("job_nodes") or [])} - {None}
    spans: list[tuple[float, float]] = []
    for c in confounders:
        kind = c["kind"]
        hides = (
            kind == "scrape_gap"
            or (kind == "exporter_down" and bool(nodes & set(c.get("nodes") or [c.get("node")])))
            or (
                fault["kind"] == "straggler"
                and kind in ("checkpoint", "eval_phase")
                and c.get("job") == fault.get("job")
            )
        )
        lo, hi = max(c["start"], fault["start"]), min(c["end"], until)
        if hides and hi > lo:
            spans.append((lo, hi))
    total, reach = 0.0, -float("inf")
    for lo, hi in sorted(spans):  # union of intervals
        lo = max(lo, reach)
        if hi > lo:
            total += hi - lo
        reach = max(reach, hi)
    return total


def score(
    episodes: Iterable[Finding], truth: Mapping[str, Any], grace_seconds: float = 300.0
) -> Score:
    """Score one scenario's episodes against its ground truth (simulator.truth)."""
    eps = list(episodes)
    faults: Sequence[Mapping[str, Any]] = truth.get("faults", [])
    confounders: Sequence[Mapping[str, Any]] = truth.get("confounders", [])
    per: dict[str, KindScore] = {}
    missed: list[str] = []
    for fault in faults:
        kinds = {fault["finding"], *fault.get("also", [])}
        hits = [
            f
            for f in eps
            if f.kind.value in kinds
            and _on_entity(f, fault)
            and f.severity.rank >= Severity.WARNING.rank
            and f.last_seen >= fault["start"]
            and _detected_at(f) <= fault["end"] + grace_seconds
        ]
        cur = per.get(fault["kind"], KindScore())
        if hits:
            at = min(_detected_at(f) for f in hits)
            ttd = max(0.0, at - fault["start"])
            seen = max(0.0, ttd - blind_seconds(fault, confounders, at))
            per[fault["kind"]] = KindScore(
                cur.faults + 1, cur.found + 1, (*cur.ttd, ttd), (*cur.ttd_seen, seen)
            )
        else:
            per[fault["kind"]] = KindScore(cur.faults + 1, cur.found, cur.ttd, cur.ttd_seen)
            missed.append(str(fault.get("id", fault["kind"])))
    actionable = [
        f for f in eps if f.severity.rank >= Severity.WARNING.rank and f.kind not in UNSCORED
    ]
    tp = 0
    fps: list[Finding] = []
    by_conf: dict[str, int] = {}
    for f in actionable:
        if any(_concerns(f, fault, grace_seconds) for fault in faults):
            tp += 1
            continue
        fps.append(f)
        for c in confounders:
            if _hits_confounder(f, c, grace_seconds):
                by_conf[c["kind"]] = by_conf.get(c["kind"], 0) + 1
    unscored: dict[str, int] = {}
    for f in eps:
        if f.kind in UNSCORED:
            unscored[f.kind.value] = unscored.get(f.kind.value, 0) + 1
    info = sum(1 for f in eps if f.severity == Severity.INFO)
    return Score(per, len(actionable), tp, tuple(fps), by_conf, tuple(missed), info, unscored)


def merge(scores: Iterable[Score]) -> Score:
    """One score over many scenarios (sums, TTDs pooled)."""
    per: dict[str, KindScore] = {}
    actionable = tp = info = 0
    fps: list[Finding] = []
    by_conf: dict[str, int] = {}
    missed: list[str] = []
    unscored: dict[str, int] = {}
    for s in scores:
        for k, v in s.per_fault_kind.items():
            cur = per.get(k, KindScore())
            per[k] = KindScore(
                cur.faults + v.faults,
                cur.found + v.found,
                (*cur.ttd, *v.ttd),
                (*cur.ttd_seen, *v.ttd_seen),
            )
        actionable += s.actionable
        tp += s.true_positive
        info += s.info_episodes
        fps.extend(s.false_positives)
        missed.extend(s.missed)
        for k, n in s.fp_by_confounder.items():
            by_conf[k] = by_conf.get(k, 0) + n
        for k, n in s.unscored.items():
            unscored[k] = unscored.get(k, 0) + n
    return Score(per, actionable, tp, tuple(fps), by_conf, tuple(missed), info, unscored)
