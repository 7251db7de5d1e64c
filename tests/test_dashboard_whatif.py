"""The What-if page: a real backtest against a real Prometheus holding a simulated window, with
progress and the time left, beside what the journal says happened."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dashboards import data
from dashboards.whatif import Eta
from evaluation.suite_eval import SuiteEta
from remediations.store import Store
from simulator.scenario import Scenario, scenario_from_dict
from tests.dashboard_seed import write_settings
from tests.prometheus_fixture import PrometheusHandle, start_prometheus, write_scenario
from tests.test_cli_detect_backtest_eval import TINY
from tests.test_dashboard_pages import app, texts


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    data.changed()
    data.store.clear()
    yield
    data.store.clear()


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return scenario_from_dict(TINY, "tiny")


@pytest.fixture(scope="module")
def prom(
    scenario: Scenario, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusHandle]:
    tmp = tmp_path_factory.mktemp("whatif")
    handle = start_prometheus(write_scenario(scenario, tmp / "tiny.om"), tmp)
    yield handle
    handle.stop()


def test_eta_says_how_long_is_left() -> None:
    eta = Eta(100, began=0.0)
    assert eta.seconds_left is None and "estimating" in eta.text()
    eta.update(25)
    left = eta.seconds_left
    assert left is not None and left > 0
    assert eta.text().startswith("25/100 steps (25 %), ~")


@pytest.mark.prometheus
def test_whatif_runs_the_backtest_with_a_chosen_policy(
    prom: PrometheusHandle, scenario: Scenario, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    Store.open(url, cluster="alpha").close()
    settings = write_settings(tmp_path / "s.json", url, "alpha", prometheus_url=prom.url)
    at = app(settings, "page_files/whatif.py")
    at.datetime_input(key="wi_start").set_value(
        datetime.fromtimestamp(scenario.start + 30, UTC).replace(tzinfo=None)
    )
    at.datetime_input(key="wi_end").set_value(
        datetime.fromtimestamp(scenario.end, UTC).replace(tzinfo=None)
    )
    at.selectbox(key="wi_policy").set_value("shipped: default")
    at.button(key="wi_run").click().run(timeout=120)
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    assert "finding episodes" in at.success[0].value
    found = at.dataframe[0].value
    assert "nccl_hang" in set(found["kind"])
    acts = at.dataframe[1].value
    pairs = set(zip(acts["playbook"], acts["target"], strict=True))
    assert ("restart_job", "job/default/train") in pairs
    assert "Nothing in the journal for this window." in texts(at)


def test_whatif_without_prometheus_says_what_to_set(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    settings = write_settings(tmp_path / "s.json", url, "alpha")
    at = app(settings, "page_files/whatif.py")
    assert "dashboard.prometheus_url" in texts(at)


def test_eval_says_how_long_the_suite_has_left() -> None:
    eta = SuiteEta([100, 100, 200])
    assert eta.scenario_done(10.0) == "1/3 scenarios done in 10 s, ~30 s left"
    assert eta.scenario_done(10.0) == "2/3 scenarios done in 20 s, ~20 s left"
    assert eta.scenario_done(20.0) == "3/3 scenarios done in 40 s"
