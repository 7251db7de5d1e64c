"""Which detectors run on the DCGM fields a fleet exports: full evidence, reduced, or not at all.

dcgm-exporter's shipped field lists leave ECC counters, NVLink error counters and clock-event
(throttle) reasons off (docs: /work/shared/reference/gpu-health-facts.md). A detector whose
fields are missing must not go silent: it either infers from what is present (SM clocks,
temperature, power, activity) and says so, or it says that it cannot run and which exporter
lines would turn its fields on (`observer.fleet.field_presence` knows the fields and those lines;
this module knows what each detector reads). `coverage(present)` takes a plain set of field
(series) names, as the observer finds them, and answers per registered detector;
`notices(...)` turns the detectors that cannot run into findings (info, kind monitoring_gap:
missing evidence, never a fault), so they reach the same outputs as every other finding.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from detectors.base import ANY_GPU_SERIES, Needs
from detectors.findings import Finding, FindingKind, Severity
from detectors.registry import registry
from observer.fleet.catalog import canonical_name
from observer.fleet.field_presence import exporter_line


class Evidence(StrEnum):
    FULL = "full"
    REDUCED = "reduced"
    CANNOT_RUN = "cannot_run"


NEEDS: Mapping[str, Needs] = MappingProxyType(
    {name: spec.needs for name, spec in registry().items() if spec.needs is not None}
)
"""Per registered detector, the needs its module declares (`NEEDS` next to its `SPEC`; a test
checks every one declares them)."""


@dataclass(frozen=True, slots=True)
class DetectorCoverage:
    detector: str
    evidence: Evidence
    missing: tuple[str, ...]
    """Fields the detector reads that are absent."""
    infers_from: tuple[str, ...]
    """Present fields it leans on instead (reduced evidence)."""
    notes: tuple[str, ...]
    """What the missing fields cost, in words."""
    exporter_lines: tuple[str, ...]
    """dcgm-exporter counters-CSV lines that turn the missing fields on."""

    def to_json(self) -> dict[str, Any]:
        return {
            "detector": self.detector,
            "evidence": self.evidence.value,
            "missing": list(self.missing),
            "infers_from": list(self.infers_from),
            "notes": list(self.notes),
            "exporter_lines": list(self.exporter_lines),
        }


def _present(names: Iterable[str]) -> frozenset[str]:
    return frozenset(canonical_name(n) for n in names)


def detector_coverage(name: str, present: Iterable[str]) -> DetectorCoverage:
    """One detector's coverage for the present field names."""
    have = _present(present)
    needs = NEEDS[name]

    def there(f: str) -> bool:
        return bool(have) if f == ANY_GPU_SERIES else f in have

    unmet = [g for g in needs.requires if not any(there(f) for f in g)]
    if unmet:
        missing = tuple(f for g in unmet for f in g if f != ANY_GPU_SERIES)
        note = (
            "no GPU series at all"
            if any(ANY_GPU_SERIES in g for g in unmet)
            else "none of " + ", ".join(missing) + " is exported"
        )
        lines = tuple(exporter_line(f) for f in missing)
        return DetectorCoverage(name, Evidence.CANNOT_RUN, missing, (), (note,), lines)
    missing = tuple(f for f in needs.full if not there(f))
    if not missing:
        return DetectorCoverage(name, Evidence.FULL, (), (), (), ())
    infers = tuple(
        dict.fromkeys(f for m in missing for f in needs.infers_from.get(m, ()) if there(f))
    )
    notes = tuple(needs.reduced.get(m, f"{m} missing") for m in missing)
    lines = tuple(exporter_line(f) for f in missing)
    return DetectorCoverage(name, Evidence.REDUCED, missing, infers, notes, lines)


def coverage(
    present: Iterable[str], detectors: Iterable[str] | None = None
) -> tuple[DetectorCoverage, ...]:
    """Per detector (every one in NEEDS unless named), how it runs on the present fields."""
    have = _present(present)
    names = list(detectors) if detectors is not None else list(NEEDS)
    return tuple(detector_coverage(n, have) for n in names)


def fields_read() -> tuple[str, ...]:
    """Every field some detector reads, in NEEDS order (what the field-presence report asks
    about besides the catalog)."""
    out: dict[str, None] = {}
    for needs in NEEDS.values():
        for f in (*(f for g in needs.requires for f in g), *needs.full):
            if f != ANY_GPU_SERIES:
                out[f] = None
    return tuple(out)


def describe(report: Iterable[DetectorCoverage]) -> list[str]:
    """For people: one line per detector not on full evidence (what it misses and what it then
    infers from), and how many run on full evidence."""
    items = list(report)
    full = [c.detector for c in items if c.evidence is Evidence.FULL]
    out = [f"detectors: {len(full)} of {len(items)} on full evidence"]
    for c in items:
        if c.evidence is Evidence.CANNOT_RUN:
            out.append(f"  {c.detector}: CANNOT RUN ({c.notes[0]})")
        elif c.evidence is Evidence.REDUCED:
            using = f"; infers from {', '.join(c.infers_from)}" if c.infers_from else ""
            out.append(f"  {c.detector}: reduced evidence ({'; '.join(c.notes)}{using})")
    return out


def notices(report: Iterable[DetectorCoverage], now: float) -> list[Finding]:
    """A finding for each detector that cannot run, so that it never goes silent."""
    out: list[Finding] = []
    for c in report:
        if c.evidence is not Evidence.CANNOT_RUN:
            continue
        out.append(
            Finding(
                kind=FindingKind.MONITORING_GAP,
                severity=Severity.INFO,
                summary=f"detector {c.detector} cannot run: {c.notes[0]}",
                first_seen=now,
                last_seen=now,
                evidence={"coverage": c.to_json()},
                recommended_action=(
                    "add these lines to dcgm-exporter's counters CSV: "
                    + " | ".join(c.exporter_lines)
                    if c.exporter_lines
                    else "check that dcgm-exporter is scraped"
                ),
                detector="coverage",
            )
        )
    return out
