"""Scheduled job kinds by name: what `service.schedule[].kind` may say.

Adding a kind is one line here: its parameter model (validated when the config loads) and its
function `(JobContext, JobRequest) -> JobOutcome`. The functions are the domain's
(remediations.scheduled, metering.daily_report_job); this module only names them.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from gpufleet.service.context import JobFunction, ServiceJobContext
from metering.daily_report_job import ReportParams, run_daily_report
from remediations.scheduled.context import JobOutcome, JobRequest
from remediations.scheduled.diagnose import DiagnoseParams, run_diagnose
from remediations.scheduled.maintenance import MaintenanceParams, run_maintenance


def daily_report(ctx: ServiceJobContext, req: JobRequest) -> JobOutcome:
    """The daily report over the cycle's journal, with the service's metering config."""
    return run_daily_report(ctx.loop.engine.store, ctx.metering, req)


@dataclass(frozen=True, slots=True)
class JobKind:
    params: type[BaseModel]
    run: JobFunction


JOB_KINDS: dict[str, JobKind] = {
    "maintenance_window": JobKind(MaintenanceParams, run_maintenance),
    "diagnose_and_return": JobKind(DiagnoseParams, run_diagnose),
    "daily_report": JobKind(ReportParams, daily_report),
}
