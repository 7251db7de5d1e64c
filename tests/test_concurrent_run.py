"""The anomaly detector on a worker thread: truly concurrent, same findings in the same order,
and a failure on the thread judged exactly as one on the suite's own thread."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from detectors.base import Detector, DetectorSpec
from detectors.concurrent_run import THREAD_FROM_GPUS, WORKER, attempt
from detectors.explained import fold_explained
from detectors.findings import Finding
from detectors.registry import bind
from detectors.suite import DetectorSuite, SuiteState, _finalise
from harness.benchmark_fleet import Fleet
from observer.fleet.model import FleetSnapshot
from tests.fleet import Fleet as SmallFleet


def _as(name: str, detect: Any) -> Detector:
    """A detector called `name` whose detect is `detect(snapshot, state, now, params)`."""
    return Detector(DetectorSpec(name, object, detect, ()), None)


def test_the_worker_runs_while_the_other_detectors_run() -> None:
    other_ran = threading.Event()
    seen: dict[str, str] = {}

    def worker(
        snapshot: FleetSnapshot, state: Any, now: float, _: Any
    ) -> tuple[list[Finding], Any]:
        seen["worker"] = threading.current_thread().name
        # Listed first, it can only see the next detector's mark if both run at once.
        seen["overlapped"] = str(other_ran.wait(timeout=5.0))
        return [], state

    def other(snapshot: FleetSnapshot, state: Any, now: float, _: Any) -> tuple[list[Finding], Any]:
        seen["other"] = threading.current_thread().name
        other_ran.set()
        return [], state

    suite = DetectorSuite((_as(WORKER, worker), _as("gpu_lost", other)))
    big = SmallFleet(nodes=THREAD_FROM_GPUS // 8).snapshot(1000.0)
    res = suite.run(big, 1000.0)
    assert res.failures == ()
    assert seen == {
        "worker": f"detector-{WORKER}",
        "other": threading.current_thread().name,
        "overlapped": "True",
    }


def test_a_small_fleet_runs_every_detector_on_the_callers_thread() -> None:
    threads: list[str] = []

    def note(snapshot: FleetSnapshot, state: Any, now: float, _: Any) -> tuple[list[Finding], Any]:
        threads.append(threading.current_thread().name)
        return [], state

    suite = DetectorSuite((_as(WORKER, note), _as("gpu_lost", note)))
    suite.run(SmallFleet(nodes=THREAD_FROM_GPUS // 8 - 1).snapshot(1000.0), 1000.0)
    assert threads == [threading.current_thread().name] * 2


def test_findings_states_and_order_equal_running_one_after_another() -> None:
    fleet = Fleet(1_000)
    default = DetectorSuite.default().detectors
    # The worker first, so its findings must come before those of detectors that finish earlier.
    suite = DetectorSuite(tuple(sorted(default, key=lambda d: d.name != WORKER)))
    assert suite.names[0] == WORKER and len(suite.names) == 10
    state = SuiteState()
    anomaly = 0
    for k in range(24):
        now, snap = fleet.snapshot(k)
        inline = [attempt(d, snap, state.states.get(d.name), now) for d in suite.detectors]
        found = [
            _finalise(f, d.name)
            for d, o in zip(suite.detectors, inline, strict=True)
            for f in o.found
        ]
        expected, _ = fold_explained(found, state.throttled, now)
        res = suite.run(snap, now, state)
        assert res.findings == tuple(expected) and res.failures == ()
        assert repr(res.findings) == repr(tuple(expected))
        mine = res.state.states[WORKER].gpus
        theirs = inline[suite.names.index(WORKER)].state.gpus
        assert mine["acc"].tobytes() == theirs["acc"].tobytes()
        state = res.state
        anomaly += sum(f.detector == WORKER for f in res.findings)
    assert anomaly > 0  # the bench fleet's anomalies were compared, not an empty list


def test_an_exception_on_the_worker_is_judged_as_on_the_suite_thread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def boom(*_: object) -> tuple[list[Finding], object]:
        assert threading.current_thread().name == f"detector-{WORKER}"  # else: another failure
        raise RuntimeError("bug in the forest")

    suite = DetectorSuite((_as(WORKER, boom), bind("gpu_lost")))
    fleet = SmallFleet(nodes=THREAD_FROM_GPUS // 8)
    fleet.stale(120.0, gpu=(0, 3))
    earlier = SuiteState({WORKER: "its state before"})
    with caplog.at_level(logging.ERROR, logger="detectors.suite"):
        res = suite.run(fleet.snapshot(1000.0), 1000.0, earlier)
    assert [f.detector for f in res.findings] == ["gpu_lost"]
    assert [(f.detector, f.error, f.at) for f in res.failures] == [
        (WORKER, "RuntimeError: bug in the forest", 1000.0)
    ]
    assert res.state.states[WORKER] == "its state before"
    assert res.state.failures[WORKER] == 1
    [record] = caplog.records
    assert record.getMessage() == f"detector {WORKER} failed at 1000"
    assert record.exc_info is not None and str(record.exc_info[1]) == "bug in the forest"


def test_an_interrupt_on_the_worker_ends_the_cycle_as_it_would_inline() -> None:
    def interrupted(*_: object) -> tuple[list[Finding], object]:
        assert threading.current_thread().name == f"detector-{WORKER}"
        raise KeyboardInterrupt

    suite = DetectorSuite((_as(WORKER, interrupted), bind("gpu_lost")))
    with pytest.raises(KeyboardInterrupt):
        suite.run(SmallFleet(nodes=THREAD_FROM_GPUS // 8).snapshot(1000.0), 1000.0)
