"""The `gpufleet eval` table: the detectors and the static dcgm-exporter rules side by side.

One glance answers the issue's question — what do the detectors find that today's alert rules
miss, how fast, and what do they page on that is not a fault — per fault kind, overall, and per
confounder kind. The JSON (`SuiteEval.to_json`) carries the same numbers and more.
"""

from __future__ import annotations

from lab.scoring import KindScore, Score
from lab.suite_eval import SuiteEval

SIDE = 30


def _ttd(v: KindScore) -> str:
    return "-" if v.median_ttd is None else f"{v.median_ttd:.0f}s"


def _kind_cells(s: Score, kind: str) -> str:
    v = s.per_fault_kind.get(kind, KindScore())
    return f"{v.found:>6} {v.recall:>7.2f} {_ttd(v):>11}"


def _row(label: str, left: str, right: str, faults: str = "") -> str:
    return f"{label:<24} {faults:>6} | {left:<{SIDE}} | {right:<{SIDE}}".rstrip()


def scenarios_table(ev: SuiteEval) -> str:
    lines = [
        f"{'scenario':<24} {'GPUs':>6} {'steps':>6} {'seconds':>8}   "
        f"{'detectors P / R / F1':<22} static rules P / R / F1"
    ]
    for s in ev.scenarios:
        d, b = s.detectors, s.static_rules
        lines.append(
            f"{s.name:<24} {s.gpus:>6} {s.steps:>6} {s.seconds:>8.1f}   "
            f"{f'{d.precision:.2f} / {d.recall:.2f} / {d.f1:.2f}':<22} "
            f"{f'{b.precision:.2f} / {b.recall:.2f} / {b.f1:.2f}'}"
        )
    return "\n".join(lines)


def side_by_side(ev: SuiteEval) -> str:
    d, b = ev.detectors, ev.static_rules
    head = f"{'found':>6} {'recall':>7} {'median TTD':>11}"
    lines = [
        _row("", f"{'detectors':^{SIDE}}", f"{'static rules':^{SIDE}}"),
        _row("fault kind", head, head, "faults"),
        "-" * (24 + 8 + 2 * (SIDE + 3)),
    ]
    for kind in sorted(set(d.per_fault_kind) | set(b.per_fault_kind)):
        n = d.per_fault_kind.get(kind, b.per_fault_kind.get(kind, KindScore())).faults
        lines.append(_row(kind, _kind_cells(d, kind), _kind_cells(b, kind), str(n)))
    lines.append("-" * (24 + 8 + 2 * (SIDE + 3)))
    for label, fd, fb in (
        ("precision", f"{d.precision:.3f}", f"{b.precision:.3f}"),
        ("strict precision", f"{d.strict_precision:.3f}", f"{b.strict_precision:.3f}"),
        ("recall", f"{d.recall:.3f}", f"{b.recall:.3f}"),
        ("recall above limits", f"{d.recall_above_limit:.3f}", f"{b.recall_above_limit:.3f}"),
        ("F1", f"{d.f1:.3f}", f"{b.f1:.3f}"),
        ("actionable episodes", f"{d.true_positive}/{d.actionable} right",
         f"{b.true_positive}/{b.actionable} right"),
        ("false positives", str(len(d.false_positives)), str(len(b.false_positives))),
        ("other kind on faulty", str(len(d.off_kind)), str(len(b.off_kind))),
    ):  # fmt: skip
        lines.append(_row(label, f"{fd:>{SIDE // 2}}", f"{fb:>{SIDE // 2}}"))
    lines.append(_row("FPs on confounders:", "", ""))
    for kind in ev.confounder_kinds:
        fd, fb = str(d.fp_by_confounder.get(kind, 0)), str(b.fp_by_confounder.get(kind, 0))
        lines.append(_row(f"  {kind}", f"{fd:>{SIDE // 2}}", f"{fb:>{SIDE // 2}}"))
    return "\n".join(lines)


def size_table(ev: SuiteEval) -> str:
    """Detection rate as a function of fault size, for the kinds that have a size scale."""
    d, b = ev.detectors, ev.static_rules
    limits = {(r.kind, r.size.unit): r.size.limit for r in d.faults if r.size.value is not None}
    if not limits:
        return ""
    lines = [f"{'fault kind':<20} {'size':>10} {'unit':<12} {'limit':>6} {'faults':>6} "
             f"{'detectors':>10} {'static':>7}"]  # fmt: skip
    db, bb = d.by_size(), b.by_size()
    for (kind, unit, size), (n, found) in sorted(
        db.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or 0)
    ):
        if size is None:
            continue
        limit = limits[(kind, unit)]
        base = bb.get((kind, unit, size), (n, 0))[1]
        lim = "-" if limit is None else f"{limit:g}"
        lines.append(
            f"{kind:<20} {size:>10g} {unit:<12} {lim:>6} {n:>6} {f'{found}/{n}':>10} "
            f"{f'{base}/{n}':>7}"
        )
    return "\n".join(lines)


def off_kind_lines(ev: SuiteEval) -> str:
    rows = [
        f"  {f.kind.value} ({f.severity.value}) on {f.gpu_uuid or f.job or f.node}: {f.summary}"
        for f in ev.detectors.off_kind
    ]
    if not rows:
        return ""
    return "\n".join(["detector findings of another kind on a faulty entity:", *rows])


def report(ev: SuiteEval) -> str:
    misses = ev.misses()
    verdict = (
        "targets met (precision, recall above the published limits >= 0.95; >= 0.9 per fault "
        "kind; no confounder pages)"
        if not misses
        else "targets NOT met: " + "; ".join(misses)
    )
    parts = [scenarios_table(ev), side_by_side(ev), size_table(ev), off_kind_lines(ev)]
    missed = ", ".join(f"{s.name}:{m}" for s in ev.scenarios for m in s.detectors.missed)
    parts.append(f"detector misses: {missed or 'none'}")
    parts.append(f"detectors: {verdict}")
    return "\n\n".join(p for p in parts if p)
