"""Score episodes (backtest output) against a scenario's ground truth: recall, precision, TTD.

Shared by the simulated suite and `gpufleet eval` (which backfills a real Prometheus first), so
both report the same numbers. Rules, chosen so that a number means what a person expects:
- A fault is *found* by an episode of its expected kind (truth `finding` or `also`) on its entity
  (GPU UUID for GPU faults and stragglers, job for hangs) that is detected between the fault's
  start and its end plus `grace_seconds`. Time to detect = detection time - fault start.
- Precision is over actionable episodes (warning and critical). An episode is a true positive
  only when its kind is accepted for the fault (truth `finding` or `also`: a DBE seen as gpu_xid
  and gpu_memory is two right findings, not one wrong one) and it is on the fault's entity during
  the fault (faults no rule names, truth finding `anomaly`: at info too). An actionable episode
  of another kind on the faulty entity (a throttled GPU also
  reported as a straggler, a hung job's GPUs reported as throttled) is neither a true nor a false
  positive: it is reported on its own (`off_kind`), listed, and `strict_precision` counts it as
  wrong. `precision` = true / (true + false). `gpu_idle` is waste, not a fault, and is left out
  of precision (it is counted on its own).
- Every fault carries its physical size (lab.fault_size: % slower, errors per second or
  minute) and whether it is above the responsible detector's published limit, so recall can be
  read as a function of fault size and over the faults above the limits.
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
from lab.fault_size import FaultSize, fault_size

UNSCORED = frozenset({FindingKind.GPU_IDLE})
NOVEL_FINDING = FindingKind.ANOMALY.value
"""Truth finding of faults no rule names (simulator NOVEL_FAULTS): found by an anomaly episode
at info, the only severity the anomaly detector raises. No detector publishes a limit for them,
so they never count in recall above the limits."""


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
class FaultResult:
    """One fault of the truth and what became of it."""

    id: str
    kind: str
    size: FaultSize
    found: bool
    ttd: float | None
    ttd_seen: float | None = None
    """Time to detect net of blind time."""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "size": self.size.value,
            "unit": self.size.unit,
            "limit": self.size.limit,
            "above_limit": self.size.above_limit,
            "found": self.found,
            "ttd_s": self.ttd,
            "ttd_net_of_blind_s": self.ttd_seen,
        }


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
    off_kind: tuple[Finding, ...] = ()
    """Actionable episodes of a kind not accepted for the fault, on the faulty entity."""
    faults: tuple[FaultResult, ...] = ()

    @property
    def recall(self) -> float:
        faults = sum(k.faults for k in self.per_fault_kind.values())
        found = sum(k.found for k in self.per_fault_kind.values())
        return found / faults if faults else 1.0

    @property
    def precision(self) -> float:
        """True / (true + false); off-kind episodes are in neither (see strict_precision)."""
        judged = self.true_positive + len(self.false_positives)
        return self.true_positive / judged if judged else 1.0

    @property
    def strict_precision(self) -> float:
        """True / all actionable episodes: off-kind episodes on the faulty entity count as wrong."""
        return self.true_positive / self.actionable if self.actionable else 1.0

    @property
    def recall_above_limit(self) -> float:
        """Recall over the faults above their detector's published limit."""
        above = [r for r in self.faults if r.size.above_limit]
        return sum(r.found for r in above) / len(above) if above else 1.0

    def above_limit_by_kind(self) -> dict[str, tuple[int, int]]:
        """Fault kind -> (faults above the limit, found)."""
        out: dict[str, tuple[int, int]] = {}
        for r in self.faults:
            if r.size.above_limit:
                n, k = out.get(r.kind, (0, 0))
                out[r.kind] = (n + 1, k + int(r.found))
        return out

    def by_size(self) -> dict[tuple[str, str, float | None], tuple[int, int]]:
        """(fault kind, unit, size) -> (faults, found): detection rate as a function of fault
        size (a throttle fault is sized by its episode length where clock-event reasons are
        collected, by its clock drop where they are not: two units for one kind)."""
        out: dict[tuple[str, str, float | None], tuple[int, int]] = {}
        for r in self.faults:
            key = (r.kind, r.size.unit, r.size.value)
            n, k = out.get(key, (0, 0))
            out[key] = (n + 1, k + int(r.found))
        return out

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "recall": round(self.recall, 4),
            "recall_above_limit": round(self.recall_above_limit, 4),
            "precision": round(self.precision, 4),
            "strict_precision": round(self.strict_precision, 4),
            "f1": round(self.f1, 4),
            "actionable_episodes": self.actionable,
            "true_positive_episodes": self.true_positive,
            "off_kind_episodes": [f.to_json() for f in self.off_kind],
            "false_positives": [f.to_json() for f in self.false_positives],
            "false_positives_by_confounder": dict(self.fp_by_confounder),
            "missed_faults": list(self.missed),
            "info_episodes": self.info_episodes,
            "unscored_episodes": dict(self.unscored),
            "faults": [r.to_json() for r in self.faults],
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
            f"({self.true_positive}/{self.actionable} actionable episodes right, "
            f"{len(self.false_positives)} false, {len(self.off_kind)} of another kind on a "
            f"faulty entity)  recall above limits {self.recall_above_limit:.3f}"
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


def _during(f: Finding, fault: Mapping[str, Any], grace: float) -> bool:
    return bool(f.last_seen >= fault["start"] and _detected_at(f) <= fault["end"] + grace)


def _accepted(f: Finding, fault: Mapping[str, Any]) -> bool:
    return f.kind.value in {str(fault["finding"]), *map(str, fault.get("also", []))}


def _right(f: Finding, fault: Mapping[str, Any], grace: float) -> bool:
    """An accepted kind on the fault's own entity while the fault is on: a true positive."""
    return _accepted(f, fault) and _on_entity(f, fault) and _during(f, fault, grace)


def _concerns(f: Finding, fault: Mapping[str, Any], grace: float) -> bool:
    """The episode speaks about this fault's entity (whatever its kind) while the fault is on."""
    if not _during(f, fault, grace):
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
    results: list[FaultResult] = []
    interval = float(truth.get("scrape_interval", 30.0))
    for fault in faults:
        floor = Severity.INFO if fault.get("finding") == NOVEL_FINDING else Severity.WARNING
        hits = [f for f in eps if f.severity.rank >= floor.rank and _right(f, fault, grace_seconds)]
        cur = per.get(fault["kind"], KindScore())
        fid = str(fault.get("id", fault["kind"]))
        size = fault_size(fault, interval, bool(truth.get("clock_reasons_collected", True)))
        if hits:
            at = min(_detected_at(f) for f in hits)
            ttd = max(0.0, at - fault["start"])
            seen = max(0.0, ttd - blind_seconds(fault, confounders, at))
            per[fault["kind"]] = KindScore(
                cur.faults + 1, cur.found + 1, (*cur.ttd, ttd), (*cur.ttd_seen, seen)
            )
            results.append(FaultResult(fid, fault["kind"], size, True, ttd, seen))
        else:
            per[fault["kind"]] = KindScore(cur.faults + 1, cur.found, cur.ttd, cur.ttd_seen)
            missed.append(fid)
            results.append(FaultResult(fid, fault["kind"], size, False, None))
    actionable = [
        f for f in eps if f.severity.rank >= Severity.WARNING.rank and f.kind not in UNSCORED
    ]
    tp = 0
    fps: list[Finding] = []
    off: list[Finding] = []
    by_conf: dict[str, int] = {}
    for f in actionable:
        if any(_right(f, fault, grace_seconds) for fault in faults):
            tp += 1
            continue
        if any(_concerns(f, fault, grace_seconds) for fault in faults):
            off.append(f)
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
    return Score(
        per, len(actionable), tp, tuple(fps), by_conf, tuple(missed), info, unscored,
        tuple(off), tuple(results),
    )  # fmt: skip


def merge(scores: Iterable[Score]) -> Score:
    """One score over many scenarios (sums, TTDs pooled)."""
    per: dict[str, KindScore] = {}
    actionable = tp = info = 0
    fps: list[Finding] = []
    by_conf: dict[str, int] = {}
    missed: list[str] = []
    unscored: dict[str, int] = {}
    off: list[Finding] = []
    results: list[FaultResult] = []
    for s in scores:
        off.extend(s.off_kind)
        results.extend(s.faults)
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
    return Score(
        per, actionable, tp, tuple(fps), by_conf, tuple(missed), info, unscored,
        tuple(off), tuple(results),
    )  # fmt: skip
