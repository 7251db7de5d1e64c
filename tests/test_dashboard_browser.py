"""The dashboard in a real browser: `dashboards.launcher` starts Streamlit on 127.0.0.1 over a
journal the real engine wrote, headless Debian Chromium (selenium + chromedriver) loads every
page at 1,280 and 1,920 px, clicks Approve on a pending action and sees the journal change.
Screenshots of each page go to the test's temporary directory; the README's come from the
running demo (tests/service/test_demo_browser.py)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from dashboards.launcher import Dashboard, start
from dashboards.settings import DashboardConfig, DashboardSettings
from harness.dashboard_seed import (
    bulk_incidents,
    seed_cluster,
    seed_fleet,
    seed_repairs,
    seed_straggler,
)
from metering import MeteringConfig
from remediations.store import Store
from remediations.types import ActionState
from tests.browser import CUT_OFF, HAVE_CHROMIUM, chromium, settle

PAGES = (
    ("fleet", "Fleet"),
    ("incidents", "Incidents"),
    ("jobs", "Jobs"),
    ("remediation", "Remediation"),
    ("policy", "Policy"),
    ("utilization", "Utilization & cost"),
    ("whatif", "What-if"),
)

WIDTHS = (1280, 1920)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not HAVE_CHROMIUM,
        reason="needs Debian chromium and chromium-driver (make system-deps)",
    ),
]


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, dict[str, str]]]:
    tmp = tmp_path_factory.mktemp("browser")
    store = Store.open(f"sqlite:///{tmp / 'journal.db'}", cluster="alpha")
    seed_fleet(store, 2048)
    seed_repairs(store)  # the Out of service table in the Remediation screenshots
    ids = seed_cluster(store)
    seed_straggler(store)  # after the engine's cycles (they resolve what they do not see)
    bulk_incidents(store, 300, days=2)
    yield store, ids
    store.close()


@pytest.fixture(scope="module")
def dashboard(
    seeded: tuple[Store, dict[str, str]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Dashboard]:
    store, _ = seeded
    settings = DashboardSettings(
        store_url=str(store.engine.url),
        cluster="alpha",
        dashboard=DashboardConfig(unauthenticated_approvals=True),
        metering=MeteringConfig(default_price=2.5),  # the cost page tells its story
    )
    dash = start(settings, 0, workdir=tmp_path_factory.mktemp("dash"))
    try:
        assert dash.wait_ready(60), (dash.settings_file.parent / "dashboard.log").read_text()
        yield dash
    finally:
        dash.stop()
    assert not dash.alive()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium(1440, 1100) as d:
        yield d


def test_every_page_loads_and_approve_changes_the_journal(
    dashboard: Dashboard,
    browser: WebDriver,
    seeded: tuple[Store, dict[str, str]],
    tmp_path: Path,
) -> None:
    store, ids = seeded
    shots = []
    for width in WIDTHS:  # a laptop and a desktop: labels and values fit at both
        browser.set_window_size(width, 1100)
        for path, title in PAGES:
            browser.get(f"{dashboard.url}/{'' if path == 'fleet' else path}")
            settle(browser, title, timeout=45.0 if width == WIDTHS[0] else 20.0)  # cold caches
            assert "Page not found" not in browser.page_source, path
            assert "Demo mode" in browser.page_source  # every page says nobody is logged in
            assert not browser.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]'), path
            assert not browser.execute_script(CUT_OFF), (path, width)
            assert not browser.find_elements(By.CSS_SELECTOR, '[data-testid="stAppDeployButton"]')
            if width == WIDTHS[0]:
                with contextlib.suppress(TimeoutException):  # the screenshots show drawn charts
                    WebDriverWait(browser, 30, poll_frequency=0.5).until(
                        lambda d: d.find_elements(By.CSS_SELECTOR, "canvas, svg.marks")
                    )
                time.sleep(1.5)
                shot = tmp_path / f"{path}.png"
                browser.save_screenshot(str(shot))
                shots.append(shot)

    browser.get(f"{dashboard.url}/remediation")
    settle(browser, "Remediation")
    assert store.get_action(ids["pending"]).state is ActionState.AWAITING_APPROVAL  # type: ignore[union-attr]
    key = f"approve_{ids['pending']}"
    button = browser.find_element(By.CSS_SELECTOR, f".st-key-{key} button")
    button.click()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        a = store.get_action(ids["pending"])
        if a is not None and a.state is ActionState.APPROVED:
            break
        time.sleep(0.2)
    a = store.get_action(ids["pending"])
    assert a is not None and a.state is ActionState.APPROVED
    assert a.approved_by == "dashboard (no login)"
    WebDriverWait(browser, 15).until(lambda d: f"{a.id}: approved by" in d.page_source)
    settle(browser, "Remediation")
    browser.save_screenshot(str(tmp_path / "remediation-approved.png"))
    assert all(s.stat().st_size > 10_000 for s in shots)
