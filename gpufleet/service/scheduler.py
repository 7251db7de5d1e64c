"""APScheduler 3.x wiring: the live cycle every interval, the scheduled entries on cron.

One in-memory job store per process (a shared persistent job store makes two processes run each
job, apscheduler #231; run state lives in `service_job_runs` instead). Every job is added with
explicit `misfire_grace_time`, `coalesce=True` and `max_instances=1`: a cycle that overruns
makes the next start wait or skip (counted), never pile up; a backlog of missed fires runs once.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.events import EVENT_JOB_MAX_INSTANCES, EVENT_JOB_MISSED, JobExecutionEvent
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from gpufleet.service.service_config import ScheduleEntry

log = logging.getLogger(__name__)
CYCLE_JOB = "cycle"


def schedule_job_id(name: str) -> str:
    return f"schedule:{name}"


class ServiceScheduler:
    def __init__(
        self,
        *,
        interval: float,
        cycle_grace: float,
        cycle: Callable[[], None],
        entries: Sequence[ScheduleEntry],
        fire: Callable[[ScheduleEntry, float | None], Any],
        on_skip: Callable[[str, str], None] = lambda job, why: None,
        on_missed: Callable[[ScheduleEntry, float], None] = lambda entry, fire: None,
        workers: int = 4,
    ) -> None:
        self.interval = interval
        self.cycle_grace = cycle_grace
        self.cycle = cycle
        self.entries = {e.name: e for e in entries if e.enabled}
        self.fire = fire
        self.on_skip = on_skip
        self.on_missed = on_missed
        self.sched = BackgroundScheduler(
            jobstores={"default": MemoryJobStore()},
            executors={"default": ThreadPoolExecutor(max_workers=workers)},
            timezone=UTC,
        )
        self.sched.add_listener(self._event, EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES)

    def start(self, first_cycle_in: float = 0.0) -> None:
        first = datetime.now(UTC) + timedelta(seconds=first_cycle_in)
        self.sched.add_job(
            self.cycle,
            IntervalTrigger(seconds=self.interval, start_date=first, timezone=UTC),
            id=CYCLE_JOB,
            name="live cycle",
            next_run_time=first,
            misfire_grace_time=max(1, math.ceil(self.cycle_grace)),
            coalesce=True,
            max_instances=1,
        )
        for e in self.entries.values():
            self.sched.add_job(
                self.fire,
                e.trigger(),
                args=[e, None],
                id=schedule_job_id(e.name),
                name=f"{e.kind} {e.name}",
                misfire_grace_time=max(1, math.ceil(e.misfire_grace)),
                coalesce=True,
                max_instances=1,
            )
        self.sched.start()

    def add_periodic(self, job_id: str, seconds: float, fn: Callable[[], None]) -> None:
        """A small recurring job beside the cycle (the alerts outbox worker): one at a time, a
        run missed while busy is simply the next one."""
        self.sched.add_job(
            fn,
            IntervalTrigger(seconds=seconds, timezone=UTC),
            id=job_id,
            name=job_id,
            misfire_grace_time=max(1, math.ceil(seconds)),
            coalesce=True,
            max_instances=1,
        )

    def run_once_now(self, entry: ScheduleEntry, fire: float) -> None:
        """A missed fire found after a restart or on becoming leader: one run, now."""
        self.sched.add_job(
            self.fire,
            DateTrigger(run_date=datetime.now(UTC), timezone=UTC),
            args=[entry, fire],
            id=f"catch-up:{entry.name}:{fire:.0f}",
            name=f"catch-up {entry.name}",
            misfire_grace_time=max(1, math.ceil(entry.misfire_grace)),
            coalesce=True,
            max_instances=1,
            replace_existing=True,
        )

    def next_runs(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for job in self.sched.get_jobs():
            nrt = job.next_run_time
            out[job.id] = nrt.timestamp() if nrt is not None else None
        return out

    def _event(self, ev: JobExecutionEvent) -> None:
        if ev.code == EVENT_JOB_MAX_INSTANCES:
            why = "the previous run is still going (max_instances=1)"
        else:
            late = time.time() - ev.scheduled_run_time.timestamp()
            why = f"started {late:.1f}s late, past its misfire grace"
        log.warning("%s: a run was skipped: %s", ev.job_id, why)
        self.on_skip(ev.job_id, why)
        if ev.code == EVENT_JOB_MISSED and ev.job_id.startswith("schedule:"):
            entry = self.entries.get(ev.job_id.removeprefix("schedule:"))
            if entry is not None:
                self.on_missed(entry, ev.scheduled_run_time.timestamp())

    def shutdown(self, wait: bool = True) -> None:
        """No new runs; with `wait`, return when the running ones have finished."""
        if self.sched.running:
            self.sched.shutdown(wait=wait)
