"""The what-if run behind the dashboard page: `gpufleet backtest` over a window of Prometheus
history with a chosen policy, reporting progress, an estimate of the time left and the episodes
found so far (a long replay shows its first findings within seconds).

Same code path as the CLI (backtesting.backtest: the Prometheus collector's range replay, the
detector suite, the policy in dry-run), so the page shows what the detectors would have found
and the policy would have done; nothing is written anywhere.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from backtesting.backtest import Backtest, step_count
from backtesting.backtest_sharded import backtest_sharded, default_shards
from detectors.findings import Finding
from detectors.suite import DetectorSuite
from observer.prometheus.plan import PromSettings
from observer.snapshot.job_identity import DEFAULT_JOB_LABEL_KEYS
from remediations.policy import DEFAULT_POLICY, load_policy

SHIPPED = DEFAULT_POLICY.parent
MAX_STEPS = 20_000
"""A what-if longer than this is refused (use `gpufleet backtest` on the CLI)."""


@dataclass
class Eta:
    """Steps done of a total, the rate so far and the time left (None until a rate is known)."""

    total: int
    began: float = field(default_factory=time.monotonic)
    done: int = 0
    episodes: list[Finding] = field(default_factory=list)
    """Finding episodes found so far (ended and still open)."""

    def update(self, done: int) -> None:
        self.done = done

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total else 1.0

    @property
    def seconds_left(self) -> float | None:
        spent = time.monotonic() - self.began
        if self.done <= 0 or spent <= 0:
            return None
        return (self.total - self.done) / (self.done / spent)

    def text(self) -> str:
        left = self.seconds_left
        eta = "estimating the time left" if left is None else f"~{left:.0f} s left"
        return f"{self.done}/{self.total} steps ({100 * self.fraction:.0f} %), {eta}"


def policies(configured: str | None) -> dict[str, Path]:
    """Policy files to choose from: the configured one first, then the shipped ones."""
    out: dict[str, Path] = {}
    if configured:
        out[f"configured ({Path(configured).name})"] = Path(configured)
    for p in sorted(SHIPPED.glob("*.yaml")):
        out[f"shipped: {p.stem}"] = p
    return out


def run(
    prometheus_url: str,
    start: float,
    end: float,
    step: float,
    policy_file: Path,
    cluster: str,
    on_progress: Callable[[Eta], None] | None = None,
    shards: int | None = None,
    suite: DetectorSuite | None = None,
    job_label_keys: tuple[str, ...] = DEFAULT_JOB_LABEL_KEYS,
) -> Backtest:
    """Backtest [start, end] every `step` with the policy in `policy_file` (ConfigError if it
    is invalid; errors.GpufleetError if Prometheus cannot answer), in time shards on `shards`
    processes (default: the CPUs; 1: sequential) with `suite` (default detectors), grouping pods
    into jobs by `job_label_keys` (the service's, so the jobs are the ones it names). Cancelling
    (Streamlit stops the page's script by raising from `on_progress`) stops the workers. An end
    past now stops at now: Prometheus would answer the future with each series' last sample."""
    end = min(end, time.time())
    if end <= start:
        raise ValueError("the window's end must be after its start")
    total = step_count(start, end, step)
    if total > MAX_STEPS:
        raise ValueError(
            f"{total} steps is more than {MAX_STEPS}: choose a shorter window or a longer step"
        )
    policy = load_policy(policy_file)
    eta = Eta(total)

    def progress(done: int, _t: float) -> None:
        eta.update(done)
        if on_progress is not None:
            on_progress(eta)

    def found(so_far: list[Finding]) -> None:
        eta.episodes = so_far
        if on_progress is not None:
            on_progress(eta)

    settings = PromSettings(
        prometheus_url, timeout=30.0, cluster=cluster, job_label_keys=job_label_keys
    )
    result = backtest_sharded(
        settings, start, end, step, suite or DetectorSuite.default(), 0, policy,
        shards or default_shards(), progress, found,
    )  # fmt: skip
    eta.update(total)
    if on_progress is not None:
        on_progress(eta)
    return result
