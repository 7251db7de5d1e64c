"""The `alerts:` section of the gpufleet config: Slack, approvals, routing, Alertmanager.

Validated once at start (pydantic, frozen); a mistake raises `ConfigError` naming the file and
the field path (`alerts.slack.routes[1].channel: ...`). Secrets are given by value or, better,
by the name of a file holding them (`signing_secret_file`), read here, never from the
environment deep inside the package.
"""

from __future__ import annotations

import ipaddress
import re
from datetime import time as dtime
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from detectors.findings import FindingKind
from errors import ConfigError
from errors.config_files import describe_validation_error, load_yaml_file
from observer.fleet.units import Duration

Level = Literal["info", "warning", "critical"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Route(_Model):
    """Incidents of these kinds and at least this severity go to `channel` (first match)."""

    channel: str = Field(min_length=1)
    kinds: tuple[FindingKind, ...] = ()
    min_severity: Level = "info"


class QuietHours(_Model):
    """Between `start` and `end` (local to `timezone`), only `min_severity` and above is sent
    at once; the rest is held in the outbox until the quiet hours end (never dropped)."""

    start: str
    end: str
    timezone: str = "UTC"
    min_severity: Level = "critical"

    @field_validator("start", "end")
    @classmethod
    def _hhmm(cls, v: str) -> str:
        if not re.fullmatch(r"([01]\d|2[0-3]):[0-5]\d", v):
            raise ValueError("a time of day HH:MM (24 h)")
        return v

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError("an IANA time zone such as Europe/Berlin") from None
        return v

    def times(self) -> tuple[dtime, dtime]:
        return dtime.fromisoformat(self.start), dtime.fromisoformat(self.end)


class Approvers(_Model):
    """Who may press Approve/Reject and run the slash command. Empty: nobody (fails closed)."""

    users: tuple[str, ...] = ()
    usergroup: str | None = None

    @field_validator("users")
    @classmethod
    def _ids(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [u for u in v if not re.fullmatch(r"[UW][A-Z0-9]{2,}", u)]
        if bad:
            raise ValueError(f"Slack user IDs such as U012AB3CD (not names), got {bad}")
        return v

    @field_validator("usergroup")
    @classmethod
    def _group(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"S[A-Z0-9]{2,}", v):
            raise ValueError("a Slack user group ID such as S0614TZR7")
        return v


class SlackConfig(_Model):
    token: str | None = None
    """Bot token (xoxb-...). None: messages go to the log and the store only (the demo)."""
    token_file: str | None = None
    signing_secret: str | None = None
    signing_secret_file: str | None = None
    app_token: str | None = None
    """App-level token (xapp-...) for Socket Mode."""
    app_token_file: str | None = None
    base_url: str = "https://slack.com/api/"
    default_channel: str = "#gpufleet"
    routes: tuple[Route, ...] = ()
    quiet_hours: QuietHours | None = None
    rate_per_minute: int = Field(default=20, ge=1, le=600)
    """Messages per channel per minute (Slack allows about one per second per channel)."""
    storm_threshold: int = Field(default=10, ge=2)
    """More new groups (nodes) than this in one cycle: one fleet-wide summary instead."""
    dashboard_url: str | None = None
    approvers: Approvers = Approvers()
    approval_ttl: float = Field(default=3600.0, gt=0)
    """Seconds a Slack approval prompt stays valid (the engine's own deadline also applies)."""
    timeout: float = Field(default=10.0, gt=0)

    @model_validator(mode="after")
    def _one_source(self) -> SlackConfig:
        for name in ("token", "signing_secret", "app_token"):
            if getattr(self, name) and getattr(self, f"{name}_file"):
                raise ValueError(f"either {name} or {name}_file, not both")
        return self


WEBHOOK_TOKEN_ENV = "ALERTMANAGER_WEBHOOK_TOKEN"
"""The environment variable that may carry the webhook's bearer token (from a Secret)."""


class IntakeConfig(_Model):
    """Alertmanager webhook intake: which alert labels name what, the finding kind, and how
    long an alert counts without being delivered again."""

    node_labels: tuple[str, ...] = ("node", "Hostname", "instance")
    gpu_labels: tuple[str, ...] = ("UUID", "gpu_uuid")
    job_labels: tuple[str, ...] = ("job_name", "exported_job")
    namespace_labels: tuple[str, ...] = ("namespace", "exported_namespace")
    kinds: dict[str, FindingKind] = Field(default_factory=dict)
    """alertname -> finding kind; others get `default_kind`. The policy's `intake.allow` says
    which (kind, severity) pairs an alert may become; others are reported as info anomalies."""
    default_kind: FindingKind = FindingKind.ANOMALY
    bearer_token_file: str | None = None
    """File holding the token the webhook must carry as `Authorization: Bearer <token>` (a
    mounted Secret). Or the environment variable ALERTMANAGER_WEBHOOK_TOKEN."""
    bearer_token: str | None = Field(default=None, exclude=True, repr=False)
    """Set from ALERTMANAGER_WEBHOOK_TOKEN at load (or by code); a config file that writes it
    is refused, since the file ships in a ConfigMap anyone who reads the namespace can read."""
    repeat_interval: Duration = Field(default=14400.0, gt=0)
    """Alertmanager's `repeat_interval` for the gpufleet receiver (its default: 4h)."""
    stale_after_repeats: float = Field(default=2.0, ge=1.0)
    """A firing alert not delivered again within this many repeat intervals is stale: it
    stops counting (a lost `resolved` delivery must not pin an incident open forever)."""
    max_alerts_per_request: int = Field(default=1000, ge=1)
    """A delivery with more alerts is refused with 413."""
    max_alerts: int = Field(default=5000, ge=1)
    """Most live alerts kept; new fingerprints beyond it are refused (429), known ones still
    refresh."""

    @property
    def stale_after(self) -> float:
        return self.repeat_interval * self.stale_after_repeats


class AlertmanagerConfig(_Model):
    url: str | None = None
    """Alertmanager base URL for output (`POST {url}/api/v2/alerts`). None: no output."""
    validity: float = Field(default=600.0, ge=30)
    """endsAt = now + validity while open; re-sent when half of it is left."""
    timeout: float = Field(default=5.0, gt=0)
    intake: IntakeConfig = IntakeConfig()

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError("an http:// or https:// URL")
        return v.rstrip("/") if v else v


class HttpConfig(_Model):
    """One inbound listener of `gpufleet run` (off by default: a fresh install opens no inbound
    port it was not asked for)."""

    enabled: bool = False
    host: str = "127.0.0.1"
    """Bind address (`0.0.0.0` in a pod). For the webhook, anything but loopback requires its
    bearer token."""
    port: int = Field(default=8085, ge=0, le=65535)


def is_loopback(host: str) -> bool:
    """Whether binding `host` reaches only this machine (`localhost`, 127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name that may resolve anywhere: not loopback


class AlertsConfig(_Model):
    """The whole `alerts:` section."""

    enabled: bool = True
    cluster_label: str | None = None
    slack: SlackConfig = SlackConfig()
    alertmanager: AlertmanagerConfig = AlertmanagerConfig()
    http: HttpConfig = HttpConfig()
    """The Slack listener: interactivity and the slash command (signed requests; the one to
    expose to the internet, for Slack)."""
    webhook_http: HttpConfig = HttpConfig(port=8086)
    """The Alertmanager webhook's listener (bearer token; in-cluster only)."""
    base_dir: str | None = Field(default=None, exclude=True)
    """Where `*_file` paths are relative to (set by `parse_alerts_config`)."""

    def secret(self, name: str) -> str | None:
        """`slack.<name>` or the stripped contents of `slack.<name>_file` (relative to the
        config file's folder when known); an unreadable file is a ConfigError."""
        value: str | None = getattr(self.slack, name)
        path: str | None = getattr(self.slack, f"{name}_file")
        if value or not path:
            return value
        p = Path(path)
        if not p.is_absolute() and self.base_dir:
            p = Path(self.base_dir) / p
        try:
            return p.read_text(encoding="utf-8").strip()
        except OSError as exc:
            where = f"alerts.slack.{name}_file"
            raise ConfigError(str(p), [f"{where}: cannot read the file ({exc.strerror})"]) from None

    def webhook_token(self) -> str | None:
        """The Alertmanager webhook's bearer token: from the environment (set at load) or the
        stripped contents of `alertmanager.intake.bearer_token_file`; unreadable: ConfigError."""
        intake = self.alertmanager.intake
        if intake.bearer_token or not intake.bearer_token_file:
            return intake.bearer_token
        p = Path(intake.bearer_token_file)
        if not p.is_absolute() and self.base_dir:
            p = Path(self.base_dir) / p
        where = "alerts.alertmanager.intake.bearer_token_file"
        try:
            token = p.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or "not UTF-8 text"
            raise ConfigError(str(p), [f"{where}: cannot read the file ({why})"]) from None
        if not token:
            raise ConfigError(str(p), [f"{where}: expected a token, the file is empty"])
        return token

    def check_exposure(self, host: str, source: str = "(config)") -> None:
        """Refuse to serve the webhook on anything but loopback without its bearer token."""
        if is_loopback(host) or self.webhook_token():
            return
        raise ConfigError(
            source,
            [
                f"alerts.webhook_http.host: {host} is not loopback, so the Alertmanager webhook "
                "needs a "
                "bearer token: expected alerts.alertmanager.intake.bearer_token_file (a mounted "
                f"Secret) or the environment variable {WEBHOOK_TOKEN_ENV}"
            ],
        )

    @field_validator("webhook_http")
    @classmethod
    def _exposed_needs_token(cls, http: HttpConfig, info: ValidationInfo) -> HttpConfig:
        am = info.data.get("alertmanager")
        intake = am.intake if isinstance(am, AlertmanagerConfig) else IntakeConfig()
        exposed = http.enabled and not is_loopback(http.host)
        if exposed and not (intake.bearer_token or intake.bearer_token_file):
            raise ValueError(
                f"a bearer token for the Alertmanager webhook, since host {http.host} is "
                "not loopback: set alerts.alertmanager.intake.bearer_token_file or the "
                f"environment variable {WEBHOOK_TOKEN_ENV}"
            )
        return http

    def relative_to(self, config_file: str | Path | None) -> AlertsConfig:
        """The same section with `*_file` paths taken relative to `config_file`'s folder."""
        if config_file is None:
            return self
        return self.model_copy(update={"base_dir": str(Path(config_file).parent)})


def parse_alerts_config(
    data: Any, source: str = "(alerts config)", prefix: str = "alerts", base_dir: str | None = None
) -> AlertsConfig:
    """Validate the `alerts:` mapping; errors name `source` and `prefix.field.path`."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(source, [f"{prefix}: expected a mapping, got {type(data).__name__}"])
    try:
        cfg = AlertsConfig.model_validate({**data, "base_dir": base_dir})
    except ValidationError as exc:
        err = describe_validation_error(source, exc)
        raise ConfigError(source, [f"{prefix}.{p}" for p in err.problems]) from None
    for name in ("token", "signing_secret", "app_token"):
        cfg.secret(name)  # unreadable: ConfigError naming the field
    cfg.webhook_token()
    return cfg


def refuse_file_secrets(data: Any, source: str) -> None:
    """A config file (it ships in a ConfigMap) must not hold the webhook's bearer token."""
    section = data.get("alerts") if isinstance(data, dict) else None
    am = section.get("alertmanager") if isinstance(section, dict) else None
    intake = am.get("intake") if isinstance(am, dict) else None
    if isinstance(intake, dict) and intake.get("bearer_token") is not None:
        raise ConfigError(
            source,
            [
                "alerts.alertmanager.intake.bearer_token: expected no token in the config file "
                "(it ships in a ConfigMap): give bearer_token_file (a mounted Secret) or the "
                f"environment variable {WEBHOOK_TOKEN_ENV}"
            ],
        )


def load_alerts_config(path: str | Path) -> AlertsConfig:
    """The `alerts:` section of a gpufleet config file (missing section: the defaults)."""
    data = load_yaml_file(path)
    if data is not None and not isinstance(data, dict):
        raise ConfigError(str(path), ["(top level): expected a mapping"])
    refuse_file_secrets(data, str(path))
    section = (data or {}).get("alerts")
    return parse_alerts_config(section, str(path), base_dir=str(Path(path).parent))
