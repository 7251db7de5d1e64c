"""Scheduled job kinds by name: what `service.schedule[].kind` may say.

Adding a kind is one line here: its parameter model (validated when the config loads) and its
function `(JobContext, JobRequest) -> JobOutcome`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from gpufleet.service.context import JobFunction
from gpufleet.service.jobs.daily_report import ReportParams, run_daily_report
from gpufleet.service.jobs.diagnose import DiagnoseParams, run_diagnose
from gpufleet.service.jobs.maintenance import MaintenanceParams, run_maintenance


@dataclass(frozen=True, slots=True)
class JobKind:
    params: type[BaseModel]
    run: JobFunction


JOB_KINDS: dict[str, JobKind] = {
    "maintenance_window": JobKind(MaintenanceParams, run_maintenance),
    "diagnose_and_return": JobKind(DiagnoseParams, run_diagnose),
    "daily_report": JobKind(ReportParams, run_daily_report),
}
