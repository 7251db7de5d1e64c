"""The daily report job: GPU-hours allocated vs busy by namespace, idle waste, incidents and
actions of the day that ended at the last midnight in `timezone` (or of the last 24 hours, for a
demo whose fleet is younger than a day), written to the store (metering.daily_job), then
metering's retention applied. Its summary names the window. The dashboard and Slack read it there.
"""

from __future__ import annotations

from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, field_validator

from metering.daily_report import daily_job, window_label
from metering.metering_config import MeteringConfig
from remediations.scheduled.context import JobOutcome, JobRequest
from remediations.store import Store


class ReportParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    timezone: str = "UTC"
    """Where the report's day starts and ends (an IANA name)."""
    covers: Literal["previous_day", "last_24h"] = "previous_day"
    """The day that ended at the last midnight (production), or the 24 hours up to the run."""

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {v!r} (expected an IANA name)") from exc
        return v


def run_daily_report(store: Store, config: MeteringConfig | None, req: JobRequest) -> JobOutcome:
    """One run for `req` (its params a ReportParams), with the config's metering section."""
    params = req.params
    assert isinstance(params, ReportParams)
    report = daily_job(
        store,
        config,
        now=req.now,
        tz=params.timezone,
        last_24h=params.covers == "last_24h",
    )
    t = report.totals
    return JobOutcome(
        ok=True,
        summary=(
            f"daily report {report.cluster} for {window_label(report, params.timezone)}: "
            f"{t.allocated_gpu_hours:.1f} GPU-h allocated, "
            f"{t.busy_gpu_hours:.1f} busy, {t.idle_gpu_hours:.1f} idle, "
            f"{report.incidents_opened} incidents opened"
        ),
        details={"start": report.start, "end": report.end},
    )
