"""The gpufleet configuration file: where the journal lives, which cluster this is, dry-run.

Loaded once at start through `errors.config_files`, so a mistake exits with code 2 and names
the file, the field path and what was expected; then passed down (no module-level environment
reads). The file is `--config`, else `$GPUFLEET_CONFIG`, else `./.gpufleet/config.yaml` when it
exists (`config_path`); none of them means the defaults: a SQLite journal `gpufleet.db` in the
working directory, cluster `default`, the shipped conservative policy.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from alerts.alerts_config import WEBHOOK_TOKEN_ENV, AlertsConfig, refuse_file_secrets
from dashboards.settings import DashboardConfig
from detectors.suite import DetectorSuite
from detectors.tuning import suite_from_section
from errors import ConfigError
from errors.config_files import load_yaml_file, validate
from gpufleet.service.service_config import ServiceConfig
from metering.metering_config import MeteringConfig
from remediations.policy import Policy, load_policy
from remediations.store import Store

PLACEHOLDER_PASSWORDS = frozenset(
    {"change-me", "changeme", "change_me", "replace-me", "replaceme", "password", "secret",
     "example", "xxx", "xxxx", "todo", "admin"}
)  # fmt: skip
"""Passwords of examples and templates: a database URL with one is refused (exit 2)."""


class GpufleetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: str = Field(default="default", min_length=1, max_length=128)
    """The `cluster` column: one gpufleet per cluster, many clusters in one PostgreSQL."""
    store_url: str = "sqlite:///gpufleet.db"
    """SQLAlchemy URL: `sqlite:///path.db` (default) or `postgresql://user@host/db`."""
    dry_run: bool = False
    """True: every rule in shadow whatever the policy's `actuation` says (a kill switch; pass it
    as `RemediationCycle(..., shadow=cfg.dry_run)`). Shadow is already the policy's default."""
    policy: str | None = None
    """Policy file (relative to this file); `--policy` overrides; none: the shipped default."""
    kubeconfig: str | None = None
    detectors: dict[str, Any] | None = None
    """The `detectors:` section (enable/disable, parameters), validated by detectors.tuning."""
    metering: MeteringConfig = Field(default_factory=MeteringConfig)
    dashboard: DashboardConfig = Field(default_factory=DashboardConfig)
    alerts: AlertsConfig = AlertsConfig()
    service: ServiceConfig = Field(default_factory=ServiceConfig)
    """`gpufleet run`: interval, schedule, leader election, HTTP, telemetry
    (docs/configuration.md)."""

    @field_validator("store_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("sqlite:", "postgresql:", "postgresql+psycopg:")):
            raise ValueError("a SQLAlchemy URL starting sqlite:/// or postgresql://")
        try:
            password = urlsplit(v).password
        except ValueError:
            password = None
        if password is not None and password.lower() in PLACEHOLDER_PASSWORDS:
            raise ValueError(
                f"a real database password, not the placeholder {password!r} (the examples "
                "ship one, e.g. deploy/overlays/postgresql/database.env: set your own)"
            )
        return v


ENVIRONMENT: dict[str, tuple[str, ...]] = {
    "DATABASE_URL": ("store_url",),
    "SLACK_BOT_TOKEN": ("alerts", "slack", "token"),
    "SLACK_SIGNING_SECRET": ("alerts", "slack", "signing_secret"),
    "SLACK_APP_TOKEN": ("alerts", "slack", "app_token"),
    "PROMETHEUS_PASSWORD": ("service", "source", "prometheus", "basic_auth", "password"),
    WEBHOOK_TOKEN_ENV: ("alerts", "alertmanager", "intake", "bearer_token"),
}
"""Secrets a deployment passes as environment variables (deploy/base: from Kubernetes Secrets):
each one that is set and not empty overrides its config key, so no secret sits in a ConfigMap.
Read here, once, at load; nothing deeper reads the environment."""


def with_environment(data: Any, environ: Mapping[str, str]) -> Any:
    """The config mapping with ENVIRONMENT's variables that are set written into it."""
    if not isinstance(data, dict):
        return data  # validation names the problem
    out: dict[str, Any] = dict(data)
    for name, path in ENVIRONMENT.items():
        value = environ.get(name, "")
        if not value:
            continue
        node = out
        for key in path[:-1]:
            child = node.get(key)
            node[key] = dict(child) if isinstance(child, dict) else {}
            node = node[key]
        node[path[-1]] = value
    return out


def load_config(
    path: str | Path | None, environ: Mapping[str, str] | None = None
) -> tuple[GpufleetConfig, Path | None]:
    """The config file (None: the defaults) with the ENVIRONMENT overrides applied."""
    env = os.environ if environ is None else environ
    source = str(path) if path is not None else "(default config)"
    data = load_yaml_file(path) if path is not None else {}
    if data is None:
        data = {}
    refuse_file_secrets(data, source)
    overridden = with_environment(data, env)
    try:
        cfg = validate(GpufleetConfig, overridden, source)
    except ConfigError as exc:
        names = [n for n in ENVIRONMENT if env.get(n)]
        if not names or overridden == data:
            raise
        hint = f"(with {', '.join(names)} from the environment)"
        problems = []
        for p in exc.problems:
            for n in names:  # a secret never lands in an error message or a log
                p = p.replace(env[n], f"${n}")
            problems.append(f"{p} {hint}")
        raise ConfigError(source, problems) from None
    return cfg, Path(path) if path is not None else None


CONFIG_ENV = "GPUFLEET_CONFIG"
LOCAL_CONFIG = Path(".gpufleet") / "config.yaml"


def config_path(
    given: str | Path | None, environ: Mapping[str, str] | None = None, cwd: Path | None = None
) -> Path | None:
    """Which config file a command reads: `--config`, else `$GPUFLEET_CONFIG`, else
    `./.gpufleet/config.yaml` if there is one; None: the defaults."""
    if given:
        return Path(given)
    env = os.environ if environ is None else environ
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV])
    local = (cwd or Path.cwd()) / LOCAL_CONFIG
    return local if local.is_file() else None


def require_journal(cfg: GpufleetConfig, source: Path | None) -> None:
    """A command that reads the journal refuses to create a new, empty one (a SQLite file that
    does not exist yet): it would list nothing and look like a quiet fleet."""
    url = cfg.store_url
    if not url.startswith("sqlite:///") or url.endswith(":memory:"):
        return
    db = Path(url.removeprefix("sqlite:///"))
    if db.exists():
        return
    where = str(source) if source is not None else "(no config: the defaults)"
    raise ConfigError(
        where,
        [
            f"store_url: no journal at {db} (expected an existing gpufleet journal; pass "
            f"--config, set {CONFIG_ENV}, or run where {LOCAL_CONFIG} is; the demo writes "
            ".gpufleet/demo-config.yaml)"
        ],
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`--config` and `--policy`, shared by every command that touches the journal."""
    p.add_argument(
        "--config",
        metavar="FILE",
        help=f"gpufleet config (YAML; default ${CONFIG_ENV}, else ./{LOCAL_CONFIG} if present)",
    )
    p.add_argument("--policy", metavar="FILE", help="remediation policy (YAML); default shipped")


def load_all(args: argparse.Namespace) -> tuple[GpufleetConfig, Policy]:
    """Validate config and policy up front (ConfigError -> exit 2), before opening anything."""
    cfg, cfg_path = load_config(config_path(getattr(args, "config", None)))
    policy_path: str | Path | None = getattr(args, "policy", None)
    if policy_path is None and cfg.policy is not None:
        base = cfg_path.parent if cfg_path is not None else Path.cwd()
        policy_path = base / cfg.policy
    return cfg, load_policy(policy_path)


def open_store(cfg: GpufleetConfig) -> Store:
    return Store.open(cfg.store_url, cluster=cfg.cluster)


def open_journal(args: argparse.Namespace) -> tuple[GpufleetConfig, Policy, Store]:
    """Config, policy and the existing journal of a reading command (`require_journal`)."""
    cfg, policy = load_all(args)
    require_journal(cfg, config_path(getattr(args, "config", None)))
    return cfg, policy, open_store(cfg)


def detector_suite(cfg: GpufleetConfig, source: str) -> tuple[DetectorSuite, int]:
    """The configured suite and episode grace cycles (no `detectors:` section: the defaults)."""
    section = cfg.detectors or {}
    return suite_from_section(section, source), int(section.get("episode_grace_cycles", 0))
