"""The built-in detectors, listed once: `BUILTIN` in run order, looked up by name.

This module imports every detector module; no detector module imports it (an import-linter
contract in pyproject.toml), so the list has no import cycle. To add a detector, write its
module with a `SPEC` and add that spec to `BUILTIN`.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from detectors import (
    anomaly,
    gpu_idle,
    gpu_interconnect,
    gpu_lost,
    gpu_memory,
    gpu_throttle,
    gpu_xid,
    monitoring_gap,
    nccl_hang,
    straggler,
)
from detectors.base import Detector, DetectorSpec

BUILTIN: tuple[DetectorSpec[Any], ...] = (
    monitoring_gap.SPEC,
    gpu_lost.SPEC,
    gpu_xid.SPEC,
    gpu_memory.SPEC,
    gpu_throttle.SPEC,
    gpu_interconnect.SPEC,
    straggler.SPEC,
    nccl_hang.SPEC,
    gpu_idle.SPEC,
    anomaly.SPEC,
)
"""Run order: the telemetry judgement first, so its findings lead each cycle's list."""


def _by_name(specs: tuple[DetectorSpec[Any], ...]) -> MappingProxyType[str, DetectorSpec[Any]]:
    table: dict[str, DetectorSpec[Any]] = {}
    for spec in specs:
        if spec.name in table:
            raise ValueError(f"detector {spec.name!r} listed twice in detectors.registry.BUILTIN")
        table[spec.name] = spec
    return MappingProxyType(table)


_BY_NAME = _by_name(BUILTIN)


def registry() -> MappingProxyType[str, DetectorSpec[Any]]:
    """Every built-in detector by name, in run order."""
    return _BY_NAME


def bind(name: str, params: Any = None) -> Detector:
    """The named built-in detector with `params` (its defaults when None)."""
    try:
        spec = _BY_NAME[name]
    except KeyError:
        known = ", ".join(_BY_NAME)
        raise KeyError(f"no detector named {name!r} (known: {known})") from None
    return Detector(spec, params if params is not None else spec.params_type())
