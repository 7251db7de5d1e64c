"""The What-if page: a real backtest against a real Prometheus holding a simulated window, with
progress and the time left, beside what the journal says happened."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dashboards import data
from dashboards.whatif import SHIPPED, Eta, run
from harness.dashboard_seed import write_settings
from lab.suite_eval import SuiteEta
from remediations.store import Store
from simulator.scenario import Scenario, scenario_from_dict
from tests.prometheus_fixture import PrometheusHandle, served_scenario
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
    yield from served_scenario(scenario, tmp_path_factory.mktemp("whatif"))


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


@pytest.mark.prometheus
def test_whatif_streams_the_episodes_found_so_far_before_the_replay_ends(
    prom: PrometheusHandle, scenario: Scenario
) -> None:
    seen: list[tuple[int, int]] = []
    result = run(
        prom.url, scenario.start + 30, scenario.end, 30.0, SHIPPED / "default.yaml", "alpha",
        lambda eta: seen.append((eta.done, len(eta.episodes))),
    )  # fmt: skip
    total = len(seen) and seen[-1][0]
    partial = [(done, n) for done, n in seen if n and done < total]
    assert partial, seen  # episodes shown while steps were still to go
    assert partial[0][1] <= len(result.episodes)
    assert [n for _, n in seen] == sorted(n for _, n in seen)  # only ever grows


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
