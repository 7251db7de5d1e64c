"""What the service hands its scheduled jobs: the remediation jobs' context
(remediations.scheduled.context) plus the config sections only the service knows (metering's,
for the daily report)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from metering import MeteringConfig
from remediations.scheduled.context import JobContext, JobOutcome, JobRequest


@dataclass
class ServiceJobContext(JobContext):
    metering: MeteringConfig | None = None
    """Prices, retention and labels for the daily report (the config's `metering:` section)."""


JobFunction = Callable[[ServiceJobContext, JobRequest], JobOutcome]
