"""The gpufleet configuration file: where the journal lives, which cluster this is, dry-run.

Loaded once at start through `errors.config_files`, so a mistake exits with code 2 and names
the file, the field path and what was expected; then passed down (no module-level environment
reads). A missing `--config` means the defaults: a SQLite journal `gpufleet.db` in the working
directory, cluster `default`, the shipped conservative policy.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dashboards.settings import DashboardConfig
from detectors.config import suite_from_section
from detectors.suite import DetectorSuite
from errors.config_files import load_model
from metering.config import MeteringConfig
from remediations.policy import Policy, load_policy
from remediations.store import Store


class GpufleetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: str = Field(default="default", min_length=1, max_length=128)
    """The `cluster` column: one gpufleet per cluster, many clusters in one PostgreSQL."""
    store_url: str = "sqlite:///gpufleet.db"
    """SQLAlchemy URL: `sqlite:///path.db` (default) or `postgresql://user@host/db`."""
    dry_run: bool = False
    """Decide and journal, never write to Kubernetes (on top of the policy's own `dry_run`)."""
    policy: str | None = None
    """Policy file (relative to this file); `--policy` overrides; none: the shipped default."""
    kubeconfig: str | None = None
    detectors: dict[str, Any] | None = None
    """The `detectors:` section (enable/disable, parameters), validated by detectors.config."""
    metering: MeteringConfig = Field(default_factory=MeteringConfig)
    dashboard: DashboardConfig = Field(default_factory=DashboardConfig)

    @field_validator("store_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("sqlite:", "postgresql:", "postgresql+psycopg:")):
            raise ValueError("a SQLAlchemy URL starting sqlite:/// or postgresql://")
        return v


def load_config(path: str | Path | None) -> tuple[GpufleetConfig, Path | None]:
    if path is None:
        return GpufleetConfig(), None
    return load_model(GpufleetConfig, path), Path(path)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """`--config` and `--policy`, shared by every command that touches the journal."""
    p.add_argument("--config", metavar="FILE", help="gpufleet config (YAML)")
    p.add_argument("--policy", metavar="FILE", help="remediation policy (YAML); default shipped")


def load_all(args: argparse.Namespace) -> tuple[GpufleetConfig, Policy]:
    """Validate config and policy up front (ConfigError -> exit 2), before opening anything."""
    cfg, cfg_path = load_config(getattr(args, "config", None))
    policy_path: str | Path | None = getattr(args, "policy", None)
    if policy_path is None and cfg.policy is not None:
        base = cfg_path.parent if cfg_path is not None else Path.cwd()
        policy_path = base / cfg.policy
    return cfg, load_policy(policy_path)


def open_store(cfg: GpufleetConfig) -> Store:
    return Store.open(cfg.store_url, cluster=cfg.cluster)


def detector_suite(cfg: GpufleetConfig, source: str) -> tuple[DetectorSuite, int]:
    """The configured suite and episode grace cycles (no `detectors:` section: the defaults)."""
    section = cfg.detectors or {}
    return suite_from_section(section, source), int(section.get("episode_grace_cycles", 0))
