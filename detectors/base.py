"""The detector contract: a spec (name, typed params, pure detect function) and its binding.

A detector is a module that defines a frozen params dataclass, a frozen state dataclass, a
pure function `detect(snapshot, state, now, params) -> (findings, new_state)` and a `SPEC`
naming them; `detectors.registry` lists the built-in specs in one tuple. Detector modules
import this module and never the registry (an import-linter contract).

No I/O, no clock: `now` comes in, the previous state comes in, and the new state goes out,
so live runs, backtest and eval replay the very same code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from detectors.findings import Finding, FindingKind, Severity
from observer.fleet.model import FleetSnapshot

P = TypeVar("P")
S = TypeVar("S")


class DetectorState(Protocol):
    def nbytes(self) -> int:
        """Bytes of numpy state held (for the per-GPU state budget)."""
        ...


DetectFn = Callable[[FleetSnapshot, Any, float, Any], tuple[list[Finding], Any]]


ANY_GPU_SERIES = "*"
"""Stands for "any per-GPU series": freshness needs no particular field."""


@dataclass(frozen=True, slots=True)
class Needs:
    """What one detector reads. It runs when at least one field of every `requires` group is
    present; it runs on full evidence when every `full` field is present as well; `reduced`
    says, per missing field, what the detector infers from instead."""

    requires: tuple[tuple[str, ...], ...]
    full: tuple[str, ...]
    reduced: Mapping[str, str]
    infers_from: Mapping[str, tuple[str, ...]]
    """Per missing field: the present fields the detector then leans on."""


@dataclass(frozen=True, slots=True)
class DetectorSpec(Generic[P]):
    """What the registry knows about a detector."""

    name: str
    params_type: type[P]
    detect: DetectFn
    kinds: tuple[FindingKind, ...]
    enabled_by_default: bool = True
    doc: str = ""
    severities: tuple[Severity, ...] = ()
    """The severities its findings can carry (with `kinds`: what a policy rule can match)."""
    needs: Needs | None = None
    """The fields it reads (detectors.coverage: full, reduced or cannot run on a fleet's fields)."""

    @property
    def produces(self) -> frozenset[tuple[FindingKind, Severity]]:
        """Every (kind, severity) this detector can report."""
        return frozenset((k, s) for k in self.kinds for s in self.severities)


@dataclass(frozen=True, slots=True)
class Detector:
    """A registered detector bound to its parameters: `detect(snapshot, state, now)`."""

    spec: DetectorSpec[Any]
    params: Any

    @property
    def name(self) -> str:
        return self.spec.name

    def detect(self, snapshot: FleetSnapshot, state: Any, now: float) -> tuple[list[Finding], Any]:
        return self.spec.detect(snapshot, state, now, self.params)


def jsonable(value: Any) -> Any:
    """numpy scalars and arrays -> plain Python, NaN/inf -> None, so evidence is strict JSON."""
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, np.ndarray):
        return [jsonable(v) for v in value.tolist()]
    if isinstance(value, float):
        return round(value, 4) if np.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def node_name(snapshot: FleetSnapshot, node_index: int) -> str | None:
    if 0 <= node_index < len(snapshot.nodes):
        return str(snapshot.nodes[node_index].name)
    return None


def job_of_gpu(snapshot: FleetSnapshot, position: int) -> str | None:
    j = int(snapshot.gpus.job_index[position])
    if 0 <= j < len(snapshot.jobs):
        return str(snapshot.jobs[j].key)
    return None


def pod_of_gpu(snapshot: FleetSnapshot, position: int) -> str | None:
    p = int(snapshot.gpus.pod_index[position])
    if 0 <= p < len(snapshot.pods):
        return str(snapshot.pods[p].key)
    return None


def gpu_context(snapshot: FleetSnapshot, position: int) -> dict[str, Any]:
    """Evidence every GPU finding carries: where the GPU is and what runs on it."""
    g = snapshot.gpus
    model = int(g.model_index[position])
    return {
        "device": int(g.device_index[position]),
        "model": g.models[model] if 0 <= model < len(g.models) else "",
        "pod": pod_of_gpu(snapshot, position),
        "job": job_of_gpu(snapshot, position),
    }


def positions(mask: np.ndarray[Any, Any]) -> Sequence[int]:
    return [int(i) for i in np.flatnonzero(mask)]
