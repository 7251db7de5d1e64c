"""Field coverage for people: the observer's field presence beside the detectors' evidence.

The composition of `observer.fleet.field_presence` (which fields are present, the dcgm-exporter
lines for the missing ones) and `detectors.coverage` (what each detector then runs on), for
`gpufleet collect --summary` and the service's log, telemetry and /readyz.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from detectors.coverage import NEEDS, DetectorCoverage, Evidence, coverage, describe, fields_read
from observer.fleet.field_presence import CATALOG_FIELDS, FieldPresence, field_presence


@dataclass(frozen=True, slots=True)
class CoverageReport:
    fields: FieldPresence
    detectors: tuple[DetectorCoverage, ...]

    def lines(self) -> list[str]:
        return [*self.fields.lines(), *describe(self.detectors)]

    def states(self) -> dict[str, str]:
        """Per detector: `full`, `reduced` or `cannot_run`."""
        return {c.detector: c.evidence.value for c in self.detectors}

    @property
    def blind(self) -> bool:
        """Some detector cannot run."""
        return any(c.evidence is Evidence.CANNOT_RUN for c in self.detectors)


def coverage_report(
    present: Iterable[str], detectors: Iterable[str] | None = None
) -> CoverageReport:
    """Coverage of the catalog and of every field a detector reads by the `present` names;
    per detector for `detectors` (every built-in one unless named; names without declared
    needs are left out)."""
    have = frozenset(present)
    names = None if detectors is None else [d for d in detectors if d in NEEDS]
    return CoverageReport(
        field_presence(have, (*CATALOG_FIELDS, *fields_read())), coverage(have, names)
    )
