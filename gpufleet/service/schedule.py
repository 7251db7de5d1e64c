"""Scheduled jobs, exactly once per fire: claim in the store, run the kind, record the outcome.

APScheduler calls `fire(entry)` at each cron time (misfire grace, coalescing and one instance per
entry are set where the jobs are added, gpufleet.service.scheduler). The fire time a call serves
is the latest cron time at or before now; it is claimed in `service_job_runs` before anything
runs, so the same fire never runs twice — not after a restart, not on a new leader, not from a
second process. After a restart or on becoming leader, `missed(entry)` finds a fire that passed
while nobody ran it: within its grace it runs once now, later it is recorded as missed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from gpufleet.service.context import ServiceJobContext
from gpufleet.service.job_runs import JobRuns
from gpufleet.service.registry import JOB_KINDS
from gpufleet.service.service_config import ScheduleEntry
from remediations.scheduled.context import JobOutcome, JobRequest

log = logging.getLogger(__name__)


def latest_fire(entry: ScheduleEntry, wall_now: float, lookback: float) -> float | None:
    """The newest cron time in (wall_now - lookback, wall_now], or None."""
    trigger = entry.trigger()
    now_dt = datetime.fromtimestamp(wall_now, UTC)
    t = trigger.get_next_fire_time(None, datetime.fromtimestamp(wall_now - lookback, UTC))
    last = None
    while t is not None and t <= now_dt:
        last = t
        t = trigger.get_next_fire_time(t, t + timedelta(seconds=1))
    return None if last is None else last.timestamp()


@dataclass
class JobStats:
    runs: dict[str, int] = field(default_factory=dict)
    misses: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)


class ScheduledJobs:
    def __init__(
        self,
        ctx: ServiceJobContext,
        runs: JobRuns,
        owner: str,
        *,
        wall: Callable[[], float] = time.time,
        on_outcome: Callable[[ScheduleEntry, float, JobOutcome | None, str], None] | None = None,
    ) -> None:
        self.ctx = ctx
        self.runs = runs
        self.owner = owner
        self.wall = wall
        self.on_outcome = on_outcome or (lambda e, f, o, s: None)
        self.stats = JobStats()

    def fire(self, entry: ScheduleEntry, fire: float | None = None) -> JobOutcome | None:
        """Run the entry for `fire` (default: its latest cron time); None when it did not run
        (already claimed, missed, or no fire time within its grace)."""
        wall_now = self.wall()
        if fire is None:
            fire = latest_fire(entry, wall_now, entry.misfire_grace + 1.0)
            if fire is None:
                return None
        if wall_now - fire > entry.misfire_grace:
            if self.runs.miss(entry.name, entry.kind, fire, self.owner, wall_now, "past grace"):
                self._missed(
                    entry, fire, f"{wall_now - fire:.0f}s late (grace {entry.misfire_grace:.0f}s)"
                )
            return None
        if not self.runs.claim(entry.name, entry.kind, fire, self.owner, wall_now):
            log.info("schedule %s: the fire at %s already ran; skipped", entry.name, _iso(fire))
            return None
        req = JobRequest(
            entry.name, entry.kind, fire, entry.parsed_params(), wall_now, self.ctx.clock()
        )
        try:
            outcome = JOB_KINDS[entry.kind].run(self.ctx, req)
        except Exception as exc:  # isolation: the scheduler and the cycle go on
            log.exception("schedule %s failed", entry.name)
            outcome = JobOutcome(False, f"{type(exc).__name__}: {exc}")
        self.runs.finish(entry.name, fire, outcome.ok, outcome.summary, self.wall())
        counter = self.stats.runs if outcome.ok else self.stats.failures
        counter[entry.name] = counter.get(entry.name, 0) + 1
        self._audit(entry, fire, f"{'ran' if outcome.ok else 'failed'}: {outcome.summary}", outcome)
        self.on_outcome(entry, fire, outcome, "ok" if outcome.ok else "failed")
        return outcome

    def missed(self, entry: ScheduleEntry) -> float | None:
        """A fire since the last recorded one that nobody ran and is still within grace (the
        caller runs it once now); a fire past grace is recorded as missed. None: nothing due.
        A job never recorded has no missed fires (it did not exist before)."""
        rec = self.runs.get(entry.name)
        if rec is None:
            return None
        wall_now = self.wall()
        lookback = max(entry.misfire_grace, 0.0) + 86400.0 * 8
        fire = latest_fire(entry, wall_now, min(lookback, wall_now - rec.last_fire))
        if fire is None or fire <= rec.last_fire:
            return None
        if wall_now - fire > entry.misfire_grace:
            if self.runs.miss(entry.name, entry.kind, fire, self.owner, wall_now, "service down"):
                self._missed(entry, fire, "the service was not running (past grace)")
            return None
        return fire

    def note_scheduler_miss(self, entry: ScheduleEntry, scheduled: float) -> None:
        """APScheduler dropped a run (later than its grace while the process ran)."""
        wall_now = self.wall()
        if self.runs.miss(
            entry.name, entry.kind, scheduled, self.owner, wall_now, "scheduler late"
        ):
            self._missed(entry, scheduled, f"started {wall_now - scheduled:.0f}s late")

    def _missed(self, entry: ScheduleEntry, fire: float, why: str) -> None:
        self.stats.misses[entry.name] = self.stats.misses.get(entry.name, 0) + 1
        log.warning("schedule %s: the fire at %s is missed: %s", entry.name, _iso(fire), why)
        self._audit(entry, fire, f"missed: {why}", None)
        self.on_outcome(entry, fire, None, "missed")

    def _audit(self, entry: ScheduleEntry, fire: float, what: str, o: JobOutcome | None) -> None:
        try:
            self.ctx.loop.engine.store.audit(
                self.ctx.clock(),
                "schedule",
                f"{entry.name} ({entry.kind}) for {_iso(fire)} {what}",
                target=f"schedule/{entry.name}",
                detail={"fire": fire, "ok": o.ok if o else None, **(o.details if o else {})},
            )
        except Exception:
            log.exception("could not journal the run of %s", entry.name)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
