"""A real Prometheus over backfilled simulator output, for tests of anything that speaks PromQL.

The server handling lives in the product (lab/local_prometheus.py, which `gpufleet eval`
uses); this module keeps the tests' API on top of it: `start_prometheus(openmetrics_path,
tmp_path)` returns a handle (call `stop()`, or use the `prometheus_factory` fixture, which stops
every server at test end), and a missing `promtool`/`prometheus` skips the test instead of
failing it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lab import local_prometheus as lp
from lab.local_prometheus import (
    CONFIG,
    READY_TIMEOUT,
    RETENTION,
    PrometheusHandle,
    binaries,
    free_port,
    write_scenario,
)
from simulator.scenario import Scenario

__all__ = [
    "CONFIG",
    "READY_TIMEOUT",
    "RETENTION",
    "PrometheusFactory",
    "PrometheusHandle",
    "backfill",
    "binaries",
    "free_port",
    "prometheus_factory",
    "require_binaries",
    "start_prometheus",
    "write_scenario",
]


def require_binaries() -> tuple[str, str]:
    found = binaries()
    if found is None:
        pytest.skip(
            "promtool/prometheus not on PATH: `make test` installs the Debian package prometheus"
        )
    return found


def backfill(openmetrics_path: Path, data_dir: Path) -> None:
    require_binaries()
    lp.backfill(openmetrics_path, data_dir)


def start_prometheus(
    openmetrics_path: Path | None,
    tmp_path: Path,
    lookback_delta: str | None = None,
) -> PrometheusHandle:
    """Backfill `openmetrics_path` (if given) into tmp_path/prom-*/data and start Prometheus."""
    require_binaries()
    return lp.start_prometheus(openmetrics_path, tmp_path, lookback_delta)


def served_scenario(scenario: Scenario, tmp_path: Path) -> Iterator[PrometheusHandle]:
    """The scenario backfilled into a Prometheus that runs until the generator closes: the body
    of a module-scoped `prom` fixture, so a module's tests share one server."""
    handle = start_prometheus(write_scenario(scenario, tmp_path / f"{scenario.name}.om"), tmp_path)
    yield handle
    handle.stop()


PrometheusFactory = Callable[..., PrometheusHandle]


@pytest.fixture
def prometheus_factory(tmp_path: Path) -> Iterator[PrometheusFactory]:
    """`factory(scenario_or_openmetrics_path, lookback_delta=None) -> PrometheusHandle`.

    Every server started through the factory is stopped when the test ends.
    """
    require_binaries()
    started: list[PrometheusHandle] = []

    def factory(
        source: Scenario | Path | str, lookback_delta: str | None = None
    ) -> PrometheusHandle:
        if isinstance(source, Scenario):
            path = write_scenario(source, tmp_path / f"{source.name}-{len(started)}.om")
        else:
            path = Path(source)
        handle = start_prometheus(path, tmp_path, lookback_delta)
        started.append(handle)
        return handle

    yield factory
    for h in started:
        h.stop()
