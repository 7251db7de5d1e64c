"""The `service:` section of the gpufleet config file: what `gpufleet run` schedules and serves.

Validated with the rest of the file (errors.config_files), so a bad key, a bad cron expression or
an unknown time zone exits 2 naming the file and the field path, for example
`gpufleet.yaml: service.schedule[1].cron: expected a 5-field crontab expression ...`.
Each scheduled entry names a job `kind` from the registry (gpufleet.service.registry); its
`params` are checked against that kind's own model.
"""

from __future__ import annotations

import re
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from errors.config_files import describe_validation_error
from gpufleet.service.registry import JOB_KINDS
from gpufleet.service.source_config import SourceConfig
from observer.fleet.units import Duration

_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def check_timezone(v: str) -> str:
    try:
        ZoneInfo(v)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError("an IANA time zone like 'Europe/Berlin' or 'UTC'") from None
    return v


class ScheduleEntry(_Strict):
    """One scheduled remediation job: a kind from the registry on a cron schedule."""

    name: str
    """Unique; the key of its run record in the store (a rename starts a new history)."""
    kind: str
    timezone: str = "UTC"
    """IANA zone the cron fields are read in (validated before `cron`, which uses it)."""
    cron: str
    """Five crontab fields: minute hour day-of-month month day-of-week (`0 22 * * mon-fri`)."""
    misfire_grace: Duration = Field(default=600.0, gt=0)
    """A run missed (process down, scheduler busy) still runs once if no later than this."""
    enabled: bool = True
    params: dict[str, Any] = Field(default_factory=dict)
    """Checked against the kind's parameter model (see docs/configuration.md)."""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("a lowercase name of letters, digits and '-' (at most 63)")
        return v

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        if v not in JOB_KINDS:
            raise ValueError(f"one of {', '.join(sorted(JOB_KINDS))}")
        return v

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        return check_timezone(v)

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str, info: ValidationInfo) -> str:
        tz = info.data.get("timezone", "UTC")  # None here when the zone itself was wrong
        try:
            CronTrigger.from_crontab(v, timezone=ZoneInfo(tz))
        except ValueError as exc:
            raise ValueError(
                f"a 5-field crontab expression like '0 22 * * mon-fri' ({exc})"
            ) from None
        return v

    @field_validator("params")
    @classmethod
    def _params(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        kind = info.data.get("kind")
        if kind is None:
            return v  # the kind is already reported
        try:
            JOB_KINDS[kind].params.model_validate(v)
        except ValidationError as exc:
            problems = describe_validation_error("", exc).problems
            raise ValueError(f"parameters of {kind}: " + "; ".join(problems)) from None
        return v

    def trigger(self) -> CronTrigger:
        return CronTrigger.from_crontab(self.cron, timezone=ZoneInfo(self.timezone))

    def parsed_params(self) -> BaseModel:
        return JOB_KINDS[self.kind].params.model_validate(self.params)


class HttpConfig(_Strict):
    host: str = "127.0.0.1"
    """Bind address of /healthz, /readyz and /metrics (`0.0.0.0` in a pod)."""
    port: int = Field(default=8080, ge=0, le=65535)
    """0: any free port (tests)."""


class LeaderElection(_Strict):
    enabled: bool = False
    """Off: this process always acts (one replica, or the embedded demo)."""
    namespace: str = "gpufleet"
    lease_name: str = "gpufleet-leader"
    identity: str | None = None
    """Holder identity; default `<hostname>-<pid>` (the pod name in a Deployment)."""
    lease_duration: Duration = Field(default=15.0, gt=0)
    """A standby takes over once the holder has not renewed for this long."""
    renew_every: Duration = Field(default=5.0, gt=0)
    """How often the leader renews and a standby retries (well below lease_duration)."""

    @field_validator("renew_every")
    @classmethod
    def _below_duration(cls, v: float, info: ValidationInfo) -> float:
        if v >= info.data.get("lease_duration", float("inf")):
            raise ValueError("a period shorter than lease_duration")
        return v


class TelemetryConfig(_Strict):
    otlp_endpoint: str | None = None
    """OTLP/HTTP collector base URL (`http://otel-collector:4318`); none: no OTLP export."""
    service_name: str = "gpufleet"


class ServiceConfig(_Strict):
    interval: Duration | None = Field(default=None, gt=0)
    """Seconds between live cycles; default the scenario's scrape interval (embedded) or 30 s."""
    cycle_misfire_grace: Duration | None = Field(default=None, gt=0)
    """A cycle start later than this is skipped (default: one interval); never piles up."""
    source: SourceConfig = Field(default_factory=SourceConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)
    leader_election: LeaderElection = Field(default_factory=LeaderElection)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    schedule: list[ScheduleEntry] = Field(default_factory=list)
    shutdown_timeout: Duration = Field(default=25.0, gt=0)
    """Seconds SIGTERM waits for the in-flight work (below the pod's termination grace)."""

    @field_validator("schedule")
    @classmethod
    def _unique(cls, v: list[ScheduleEntry]) -> list[ScheduleEntry]:
        seen: set[str] = set()
        for e in v:
            if e.name in seen:
                raise ValueError(f"unique entry names ({e.name!r} appears twice)")
            seen.add(e.name)
        return v
