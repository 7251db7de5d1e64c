"""APScheduler wiring: explicit misfire grace, coalescing and one instance per job; a cycle
that overruns its interval makes later starts skip (counted), never pile up."""

from __future__ import annotations

import threading
import time

from gpufleet.service.scheduler import CYCLE_JOB, ServiceScheduler, schedule_job_id
from gpufleet.service.service_config import ScheduleEntry


def test_overrunning_cycle_never_piles_up() -> None:
    running = 0
    most = 0
    runs = 0
    lock = threading.Lock()
    skips: list[str] = []

    def slow_cycle() -> None:
        nonlocal running, most, runs
        with lock:
            running += 1
            most = max(most, running)
            runs += 1
        time.sleep(0.45)
        with lock:
            running -= 1

    entry = ScheduleEntry(name="nightly", kind="maintenance_window", cron="0 22 * * *")
    s = ServiceScheduler(
        interval=0.1,
        cycle_grace=0.05,
        cycle=slow_cycle,
        entries=[entry],
        fire=lambda e, f: None,
        on_skip=lambda job, why: skips.append(job),
    )
    s.start()
    try:
        jobs = {j.id: j for j in s.sched.get_jobs()}
        for job_id in (CYCLE_JOB, schedule_job_id("nightly")):
            j = jobs[job_id]
            assert j.coalesce is True and j.max_instances == 1 and j.misfire_grace_time >= 1
        assert jobs[schedule_job_id("nightly")].misfire_grace_time == 600
        time.sleep(1.5)
    finally:
        s.shutdown(wait=True)
    assert most == 1
    assert 2 <= runs <= 5  # 1.5 s of 0.45 s cycles, not 15 piled-up runs
    assert CYCLE_JOB in skips
