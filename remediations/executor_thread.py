"""The executor in a worker thread, fed by the journal: remediation never blocks detection.

A drain may wait on PodDisruptionBudgets for up to its timeout (10 minutes by default). Run in
the detection cycle, that wait would hold every later cycle back. Here the detection cycle only
decides and journals (fast), then `wake()`s this thread, which carries out what the journal says
is approved or interrupted (`Executor.run`, every gate re-checked at the moment of acting). The
thread also runs a pass every `idle_wait` wall seconds without being woken, so approvals given
between cycles and interrupted actions move on. While a step runs, the executor renews its
lease on the action, so no runner elsewhere resumes it mid-drain.

    worker = ExecutorThread(executor, view=cycle.latest_view, clock=clock,
                            fresh=journal.still_needed).start()
    ...each detection cycle: journal.cycle(findings, view, now); worker.wake()
    worker.stop()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from errors.outages import OutageLog, dependency_of
from remediations.cluster_view import ClusterView
from remediations.executor import Executor, FreshnessCheck
from remediations.store import ActionRecord

log = logging.getLogger(__name__)


class ExecutorThread:
    """One daemon thread running executor passes; `start`, `wake` after each cycle, `stop`."""

    def __init__(
        self,
        executor: Executor,
        view: Callable[[float], ClusterView | None],
        clock: Callable[[], float],
        *,
        fresh: FreshnessCheck | None = None,
        idle_wait: float = 5.0,
        name: str = "gpufleet-executor",
        may_act: Callable[[], bool] | None = None,
    ) -> None:
        self.executor = executor
        self.view = view
        self.clock = clock
        self.fresh = fresh
        self.idle_wait = idle_wait
        self.name = name
        self.may_act = may_act
        """Asked before each pass: False skips it (a service that is not the leader, or is
        stopping, must not write to Kubernetes even between cycles)."""
        self.passes = 0
        self.errors = 0
        self.last_error = ""
        self.touched: list[ActionRecord] = []
        """What the latest pass started, resumed or finished."""
        self.on_touched: Callable[[list[ActionRecord]], None] | None = None
        """Called after each pass that touched actions (the service's telemetry)."""
        self.outages = OutageLog(log)
        """Its own by default; a service shares its cycle's, so an outage is one line a minute
        in total, not one from each worker."""
        self._failing: set[str] = set()
        """The dependencies this worker's passes found failing (a clean pass says only these
        recovered: the exporters' outage is not this worker's to end)."""
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._idle = threading.Condition()
        self._requested = 0
        self._done = 0
        self._thread: threading.Thread | None = None

    def start(self) -> ExecutorThread:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()
        return self

    def wake(self) -> None:
        """Ask for a pass soon (after the cycle journaled its decisions)."""
        with self._idle:
            self._requested += 1
        self._wake.set()

    def settle(self, timeout: float) -> bool:
        """Wait until a pass that began after the latest `wake` has finished (tests, shutdown
        reports). False on timeout, e.g. while a drain still waits on a disruption budget."""
        with self._idle:
            want = self._requested
            return self._idle.wait_for(lambda: self._done >= want, timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop after the current pass (a waiting drain ends when the actuator's sleep is
        interrupted by whoever owns it; the action resumes on the next start). False when the
        pass is still running after `timeout` (the thread is then left as a daemon)."""
        self._stop.set()
        self._wake.set()
        stopped = True
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("%s still busy after %.0f s; left as a daemon", self.name, timeout)
                stopped = False
            self._thread = None
        return stopped

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.idle_wait)
            self._wake.clear()
            if self._stop.is_set():
                break
            with self._idle:
                asked = self._requested
            self._pass()
            with self._idle:
                self._done = max(self._done, asked)
                self._idle.notify_all()

    def _pass(self) -> None:
        if self.may_act is not None and not self.may_act():
            return
        try:
            now = self.clock()
            self.touched = self.executor.run(self.view(now), now, fresh=self.fresh)
            self.passes += 1
            for dependency in sorted(self._failing):
                self.outages.recovered(dependency)
            self._failing.clear()
            if self.touched and self.on_touched is not None:
                self.on_touched(self.touched)
        except Exception as exc:  # isolation: the next pass must run
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            self.outages.exception("executor pass", exc)
            if (failing := dependency_of(exc)) is not None:
                self._failing.add(failing)
