"""A detector suite whose detectors each run in a `detector:<name>` span."""

from __future__ import annotations

import dataclasses
from typing import Any

from detectors.base import DetectFn, Detector
from detectors.suite import DetectorSuite
from gpufleet.service.telemetry import Telemetry


def _traced(fn: DetectFn, name: str, t: Telemetry) -> DetectFn:
    def detect(snapshot: Any, state: Any, now: float, params: Any) -> Any:
        with t.span(f"detector:{name}"):
            return fn(snapshot, state, now, params)

    return detect


def traced_suite(suite: DetectorSuite, t: Telemetry) -> DetectorSuite:
    return DetectorSuite(
        tuple(
            Detector(
                dataclasses.replace(d.spec, detect=_traced(d.spec.detect, d.name, t)), d.params
            )
            for d in suite.detectors
        )
    )
