"""What the dashboard needs to know, resolved once by `gpufleet dashboard` and handed to the app.

The `dashboard:` section of the gpufleet config (`DashboardConfig`) says who may approve and how
often pages refresh; `gpufleet dashboard` resolves it with the store URL, cluster, policy file and
the service's job-name label keys (`service.source.job_label_keys`) into one `DashboardSettings`
JSON file that the Streamlit process reads at start (the app never reads the environment or
parses the gpufleet config itself).

    dashboard:
      approvers: [alice@example.com]   # st.user.email values allowed to approve (with st.login)
      unauthenticated_approvals: false # demo only: without st.login anyone may approve
      refresh_seconds: 15              # auto-refresh of live parts of the pages
      prometheus_url: null             # what-if backtests read history from here
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from errors.config_files import load_model
from metering import MeteringConfig
from observer.snapshot.job_identity import DEFAULT_JOB_LABEL_KEYS


class DashboardConfig(BaseModel):
    """The `dashboard:` section of the gpufleet config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    approvers: list[str] = Field(default_factory=list)
    """Logged-in users (st.user.email) who may approve, reject and pause."""
    unauthenticated_approvals: bool = False
    """Without st.login configured, let anyone who reaches the page approve (the demo only)."""
    refresh_seconds: float = Field(default=15.0, ge=1.0, le=3600.0)
    prometheus_url: str | None = None
    """Where the what-if page reads history for backtests (none: the page says so)."""
    port: int = Field(default=8501, ge=0, le=65535)


class DashboardSettings(BaseModel):
    """Everything the running app needs, as one validated file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    store_url: str
    cluster: str = "default"
    """The cluster this gpufleet runs for (the selector's default)."""
    policy: str | None = None
    """Policy file the engine uses for approvals and the Policy page (none: the shipped one)."""
    dashboard: DashboardConfig = Field(default_factory=DashboardConfig)
    metering: MeteringConfig = Field(default_factory=MeteringConfig)
    """Prices per GPU-hour and currency for the utilization & cost page."""
    job_label_keys: tuple[Annotated[str, Field(min_length=1)], ...] = Field(
        default=DEFAULT_JOB_LABEL_KEYS, min_length=1
    )
    """The config's `service.source.job_label_keys`: What-if groups pods into jobs as the
    service and `gpufleet backtest` do (default: the built-in keys, so older files load)."""

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(self.model_dump(mode="json"), indent=2), encoding="utf-8")
        return path


def load_settings(path: str | Path) -> DashboardSettings:
    return load_model(DashboardSettings, path)
