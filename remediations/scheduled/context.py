"""What a scheduled job is handed: the live remediation cycle, the cluster's Jobs, clocks.

Jobs act only through the remediation cycle's public parts (its policy gates, the journal, the
executor that runs approved actions through the one actuator) and through adapters for the few
Kubernetes objects the service itself owns (diagnostic Jobs), so every job goes through the same
gates and journal as the live cycle.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from remediations.capabilities import NodeJobs
from remediations.cycle import RemediationCycle


@dataclass(frozen=True, slots=True)
class JobRequest:
    """One run of a scheduled entry: which fire time it serves, with its validated params."""

    name: str
    kind: str
    fire: float
    """The scheduled (wall-clock) time this run belongs to."""
    params: BaseModel
    wall_now: float
    """Wall-clock time the run started (windows and grace are judged in wall time)."""
    now: float
    """The service clock for journal rows (scenario time in the embedded demo)."""


@dataclass(frozen=True, slots=True)
class JobOutcome:
    ok: bool
    summary: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class JobContext:
    loop: RemediationCycle
    clock: Callable[[], float]
    """The service clock (journal times)."""
    diagnostics: NodeJobs | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    """Held by the live cycle and by every job while it decides and acts: never interleaved."""
    sleep: Callable[[float], bool] = field(default=lambda s: False)
    """Wait up to s wall seconds; True when the service is stopping (the job should return)."""
    gpu_holders: Callable[[], Mapping[str, str] | None] | None = None
    """GPU UUID -> the pod holding it, from the latest snapshot (dcgm-exporter's attribution);
    None, or a None answer: unknown (the diagnostic job then leaves fenced GPUs alone)."""
