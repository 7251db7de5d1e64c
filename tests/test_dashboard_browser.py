"""The dashboard in a real browser: `dashboards.launcher` starts Streamlit on 127.0.0.1 over a
journal the real engine wrote, headless Debian Chromium (selenium + chromedriver) loads every
page, clicks Approve on a pending action and sees the journal change. Screenshots of each page
go to docs/screenshots/ (the README shows them)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from dashboards.launcher import Dashboard, start
from dashboards.settings import DashboardConfig, DashboardSettings
from metering import MeteringConfig
from remediations.store import Store
from remediations.types import ActionState
from tests.dashboard_seed import (
    bulk_incidents,
    seed_cluster,
    seed_fleet,
    seed_repairs,
    seed_straggler,
)

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
SHOTS = Path(__file__).resolve().parents[1] / "docs" / "screenshots"
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
CUT_OFF = """return [...document.querySelectorAll(
  '[data-testid="stMetricLabel"] p, [data-testid="stMetricValue"] div')]
  .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent)"""
"""Metric labels and values Streamlit cut with an ellipsis ("Idle allocated G...")."""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (Path(CHROMIUM).exists() and Path(DRIVER).exists()),
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
    o = webdriver.ChromeOptions()
    o.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1440,1100", "--hide-scrollbars"):  # fmt: skip
        o.add_argument(arg)
    d = webdriver.Chrome(service=Service(DRIVER), options=o)
    try:
        yield d
    finally:
        d.quit()


def settle(d: WebDriver, title: str, timeout: float = 20.0) -> None:
    """Wait for the page's title, then until Streamlit stops running and charts drew."""
    w = WebDriverWait(d, timeout, poll_frequency=0.2)
    w.until(lambda d: any(h.text == title for h in d.find_elements(By.TAG_NAME, "h1")))
    with contextlib.suppress(TimeoutException):
        w.until(lambda d: not d.find_elements(By.CSS_SELECTOR, '[data-testid="stStatusWidget"]'))
    with contextlib.suppress(TimeoutException):  # placeholders of parts still drawing
        w.until(lambda d: not d.find_elements(By.CSS_SELECTOR, '[data-testid="stSkeleton"]'))
    time.sleep(0.8)  # Vega draws after the script ends


def test_every_page_loads_and_approve_changes_the_journal(
    dashboard: Dashboard, browser: WebDriver, seeded: tuple[Store, dict[str, str]]
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
                with contextlib.suppress(TimeoutException):  # the README shows drawn charts
                    WebDriverWait(browser, 30, poll_frequency=0.5).until(
                        lambda d: d.find_elements(By.CSS_SELECTOR, "canvas, svg.marks")
                    )
                time.sleep(1.5)
                shot = SHOTS / f"{path}.png"
                SHOTS.mkdir(parents=True, exist_ok=True)
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
    browser.save_screenshot(str(SHOTS / "remediation-approved.png"))
    assert all(s.stat().st_size > 10_000 for s in shots)
