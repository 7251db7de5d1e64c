"""The daily report job: GPU-hours allocated vs busy by namespace, idle waste, incidents and
actions of the day that ended at the last midnight in `timezone`, written to the store
(metering.daily_job), then metering's retention applied. The dashboard and Slack read it there.
"""

from __future__ import annotations

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, field_validator

from gpufleet.service.context import JobContext, JobOutcome, JobRequest
from metering import daily_job


class ReportParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    timezone: str = "UTC"
    """Where the report's day starts and ends (an IANA name)."""

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {v!r} (expected an IANA name)") from exc
        return v


def run_daily_report(ctx: JobContext, req: JobRequest) -> JobOutcome:
    params = req.params
    assert isinstance(params, ReportParams)
    report = daily_job(ctx.loop.engine.store, ctx.metering, now=req.now, tz=params.timezone)
    t = report.totals
    return JobOutcome(
        ok=True,
        summary=(
            f"daily report {report.cluster}: {t.allocated_gpu_hours:.1f} GPU-h allocated, "
            f"{t.busy_gpu_hours:.1f} busy, {t.idle_gpu_hours:.1f} idle, "
            f"{report.incidents_opened} incidents opened"
        ),
        details={"start": report.start, "end": report.end},
    )
