"""Each detector's outcome over one snapshot, the anomaly detector on a worker thread.

The anomaly detector is over half of a cycle at every fleet size (issue 25: ~120 of ~200 ms at
100k GPUs), and most of its time is spent in scikit-learn's tree walks and numpy's sorts, which
release the GIL; so it runs on a worker thread while the others run on the caller's, and on two
cores a cycle takes about as long as the longer of the two. Nothing else changes: detectors are
pure functions of (snapshot, their own state), each outcome is kept apart and the suite reads
them in its own order, so findings, states and failures are the same as one after the other.
An exception is caught on the thread that raised it and handed back as the outcome, judged by
the suite as before; anything that is not an `Exception` (KeyboardInterrupt, SystemExit) is
raised again on the caller's thread, as it would have been.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from detectors.base import Detector
from detectors.findings import Finding
from observer.fleet.model import FleetSnapshot

WORKER = "anomaly"
"""The detector run on the worker thread (the only one worth a thread: see the module's doc)."""
THREAD_FROM_GPUS = 1_000
"""Smaller fleets run it inline: their arrays are too short for numpy to release the GIL for
long, so a thread only adds hand-overs (a 104-GPU scenario replay: ~10 % more CPU, no faster;
1k-GPU bench fleet: the same CPU, ~30 % less wall time per cycle)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one detector's `detect` gave: findings and its next state, or the exception."""

    found: list[Finding]
    state: Any
    error: BaseException | None
    seconds: float
    """Wall seconds it took (self-telemetry)."""


def attempt(det: Detector, snapshot: FleetSnapshot, state: Any, now: float) -> Outcome:
    """`det.detect` with an `Exception` caught as the outcome (isolation: the suite judges it)."""
    t0 = time.perf_counter()
    try:
        found, new_state = det.detect(snapshot, state, now)
    except Exception as exc:
        return Outcome([], None, exc, time.perf_counter() - t0)
    return Outcome(found, new_state, None, time.perf_counter() - t0)


class _Worker(threading.Thread):
    """One detector's `attempt` on its own thread; `outcome()` joins it."""

    def __init__(self, det: Detector, snapshot: FleetSnapshot, state: Any, now: float) -> None:
        super().__init__(name=f"detector-{det.name}", daemon=True)
        self._args = (det, snapshot, state, now)
        self._outcome: Outcome | None = None
        self._raised: BaseException | None = None

    def run(self) -> None:
        try:
            self._outcome = attempt(*self._args)
        except BaseException as exc:  # not an Exception: raised again on the caller's thread
            self._raised = exc

    def outcome(self) -> Outcome:
        self.join()
        if self._raised is not None:
            raise self._raised
        assert self._outcome is not None
        return self._outcome


def outcomes(
    detectors: Sequence[Detector], snapshot: FleetSnapshot, now: float, states: Mapping[str, Any]
) -> list[Outcome]:
    """Each detector's outcome, in `detectors`' order; WORKER on its own thread if others run
    and the fleet has THREAD_FROM_GPUS GPUs or more."""
    names = [d.name for d in detectors]
    big = len(snapshot.gpus) >= THREAD_FROM_GPUS
    on_thread = names.index(WORKER) if WORKER in names and len(names) > 1 and big else -1
    worker: _Worker | None = None
    if on_thread >= 0:
        det = detectors[on_thread]
        worker = _Worker(det, snapshot, states.get(det.name), now)
        worker.start()
    done: list[Outcome | None] = [None] * len(detectors)
    try:
        for i, det in enumerate(detectors):
            if i != on_thread:
                done[i] = attempt(det, snapshot, states.get(det.name), now)
    finally:
        if worker is not None:
            worker.join()
    if worker is not None:
        done[on_thread] = worker.outcome()
    return [out for out in done if out is not None]
