"""The detector runner: every enabled detector over one snapshot, each isolated from the others.

One detector raising must not take the cycle down (a bug in the anomaly model must not hide a
lost GPU): its exception is logged and counted, its previous state is kept, and the others run
on. A straggler that gpu_throttle explains on the same GPU is folded into the throttle finding
(detectors.explained: one cause, one incident). The suite itself holds no state between
calls — `run(snapshot, now, state)` returns the next `SuiteState`, so live loops, `backtest`
and `eval` all drive it the same way, in time order.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from detectors.base import Detector, jsonable
from detectors.explained import fold_explained
from detectors.findings import Finding
from detectors.registry import bind, registry
from observer.fleet.model import FleetSnapshot

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DetectorFailure:
    detector: str
    error: str
    at: float


@dataclass(frozen=True, slots=True)
class SuiteState:
    """Each detector's state by name, and how many times each has failed so far."""

    states: Mapping[str, Any] = field(default_factory=dict)
    failures: Mapping[str, int] = field(default_factory=dict)
    throttled: Mapping[str, float] = field(default_factory=dict)
    """GPU uuid -> when gpu_throttle last reported it (detectors.explained)."""

    def nbytes(self) -> int:
        total = 0
        for s in self.states.values():
            nb = getattr(s, "nbytes", None)
            if callable(nb):
                total += int(nb())
        return total


@dataclass(frozen=True, slots=True)
class CycleResult:
    findings: tuple[Finding, ...]
    failures: tuple[DetectorFailure, ...]
    state: SuiteState
    seconds: Mapping[str, float]
    """Wall seconds each detector took (self-telemetry; never used for detection)."""


def _finalise(f: Finding, name: str) -> Finding:
    """Stamp the detector's name; evidence as strict JSON (numpy -> Python, NaN -> None)."""
    return dataclasses.replace(
        f, detector=f.detector or name, evidence=MappingProxyType(jsonable(dict(f.evidence)))
    )


@dataclass(frozen=True, slots=True)
class DetectorSuite:
    detectors: tuple[Detector, ...]

    @staticmethod
    def default(names: Iterable[str] | None = None) -> DetectorSuite:
        """The built-in detectors with default params (enabled-by-default ones unless named)."""
        specs = registry()
        chosen = (
            list(names)
            if names is not None
            else [n for n, s in specs.items() if s.enabled_by_default]
        )
        return DetectorSuite(tuple(bind(n) for n in chosen))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.detectors)

    def run(
        self, snapshot: FleetSnapshot, now: float, state: SuiteState | None = None
    ) -> CycleResult:
        prev = state or SuiteState()
        findings: list[Finding] = []
        failures: list[DetectorFailure] = []
        states: dict[str, Any] = dict(prev.states)
        counts: dict[str, int] = dict(prev.failures)
        seconds: dict[str, float] = {}
        for det in self.detectors:
            t0 = time.perf_counter()
            try:
                found, new_state = det.detect(snapshot, prev.states.get(det.name), now)
            except Exception as exc:  # isolation: one bad detector never ends the cycle
                log.exception("detector %s failed at %.0f", det.name, now)
                failures.append(DetectorFailure(det.name, f"{type(exc).__name__}: {exc}", now))
                counts[det.name] = counts.get(det.name, 0) + 1
            else:
                states[det.name] = new_state
                findings.extend(_finalise(f, det.name) for f in found)
            seconds[det.name] = time.perf_counter() - t0
        folded, throttled = fold_explained(findings, prev.throttled, now)
        new = SuiteState(MappingProxyType(states), MappingProxyType(counts), throttled)
        return CycleResult(tuple(folded), tuple(failures), new, MappingProxyType(seconds))
