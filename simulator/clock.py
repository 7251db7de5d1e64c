"""Scenario time versus wall time for a live simulation.

A scenario is written in its own time line (start + offsets); a live simulator runs on the wall
clock, optionally faster (`speed` 60 = one scenario hour per wall minute). Kubernetes objects are
stamped with wall time (as a real API server would), while faults, workload start/end and pod
start-up follow scenario time. Tests inject `wall` to step time by hand.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class SimClock:
    """Maps the wall clock to scenario time: t = start + (wall - wall0) * speed."""

    def __init__(
        self,
        scenario_start: float,
        *,
        speed: float = 1.0,
        wall: Callable[[], float] = time.time,
        wall0: float | None = None,
    ) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.scenario_start = scenario_start
        self.speed = speed
        self.wall = wall
        self.wall0 = wall() if wall0 is None else wall0

    def now(self) -> float:
        """Wall time (unix seconds): what object timestamps show."""
        return self.wall()

    def scenario_time(self) -> float:
        return self.scenario_start + (self.wall() - self.wall0) * self.speed

    def wall_of(self, scenario_t: float) -> float:
        return self.wall0 + (scenario_t - self.scenario_start) / self.speed

    def __call__(self) -> float:
        return self.scenario_time()


class ManualWall:
    """A wall clock that moves only when told: `ManualWall(t0)`, `.advance(seconds)`."""

    def __init__(self, t0: float = 1_767_225_600.0) -> None:
        self._t = t0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._t

    def advance(self, seconds: float) -> float:
        with self._lock:
            self._t += seconds
            return self._t
