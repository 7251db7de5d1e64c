"""The `metering:` section of the gpufleet config: retention, prices per GPU-hour, the team label.

    metering:
      retention_days: 35             # 5-minute rollups older than this are pruned
      hourly_retention_days: 400     # hourly rollups older than this are pruned
      report_retention_days: 400     # daily reports kept this long
      max_gap_seconds: 300           # a gap between cycles counts at most this long
      team_label: team               # pod label that names the team
      pool_label: gpufleet.io/pool   # node label that names the node pool
      currency: USD
      prices:                        # per GPU-hour, by GPU model name (dcgm-exporter modelName)
        "NVIDIA H100 80GB HBM3": 2.50
        "NVIDIA A100-SXM4-80GB": 1.60
      default_price: 2.00            # for models not listed (omit: their money is not counted)

Validated once at start; a mistake raises ConfigError naming the file and the field path, e.g.
`gpufleet.yaml: metering.prices.NVIDIA H100 80GB HBM3: expected input should be greater than
or equal to 0 (got -1)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from errors import ConfigError
from errors.config_files import describe_validation_error

SECTION = "metering"
BUCKET_SECONDS = 300
"""Rollup resolution: 5 minutes."""
HOUR_SECONDS = 3600
"""The coarser rollup kept longer, for long windows."""

Price = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]


class MeteringConfig(BaseModel):
    """What metering keeps, for how long, and what a GPU-hour costs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    retention_days: float = Field(default=35.0, gt=0, le=3660)
    """5-minute rollups older than this many days are deleted by `prune`."""
    hourly_retention_days: float = Field(default=400.0, gt=0, le=3660)
    """Hourly rollups older than this many days are deleted by `prune`."""
    report_retention_days: float = Field(default=400.0, gt=0, le=3660)
    """Daily reports older than this many days are deleted by `prune`."""
    max_gap_seconds: float = Field(default=300.0, gt=0, le=86400)
    """A gap between two recorded cycles counts at most this long (like Prometheus' 5-minute
    lookback): after an outage of the service, its unseen hours are not invented."""
    team_label: str = Field(default="team", min_length=1, max_length=317)
    """Pod label whose value names the team a GPU's usage is billed to ("" when absent)."""
    pool_label: str = Field(default="gpufleet.io/pool", min_length=1, max_length=317)
    """Node label whose value names the node pool ("" when absent), as the policy's gates use."""
    currency: str = Field(default="USD", min_length=1, max_length=8)
    prices: dict[str, Price] = Field(default_factory=dict)
    """Price per GPU-hour by GPU model name (as dcgm-exporter's `modelName` reports it)."""
    default_price: Price | None = None
    """Price per GPU-hour of models not in `prices`; None: their idle money is not counted."""

    def price_for(self, model: str) -> float | None:
        return self.prices.get(model, self.default_price)


def metering_config_from_section(section: Any, source: str = "<config>") -> MeteringConfig:
    """Validate a `metering:` mapping (None: the defaults), or raise ConfigError naming
    `source` and the field path under `metering.`."""
    if section is None:
        return MeteringConfig()
    if isinstance(section, MeteringConfig):
        return section
    if not isinstance(section, Mapping):
        raise ConfigError(source, [f"{SECTION}: expected a mapping, got {type(section).__name__}"])
    try:
        return MeteringConfig.model_validate(dict(section))
    except ValidationError as exc:
        err = describe_validation_error(source, exc)
        raise ConfigError(source, [f"{SECTION}.{p}" for p in err.problems]) from None
