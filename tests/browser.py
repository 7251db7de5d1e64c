"""Headless Debian Chromium for the dashboard's browser tests: start it, wait for a Streamlit
page to settle, and read what a person reads (metric tiles, table cells, chart axis titles)."""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
HAVE_CHROMIUM = Path(CHROMIUM).exists() and Path(DRIVER).exists()
CUT_OFF = """return [...document.querySelectorAll(
  '[data-testid="stMetricLabel"] p, [data-testid="stMetricValue"] div')]
  .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent)"""
"""Metric labels and values Streamlit cut with an ellipsis ("Idle allocated G...")."""
METRICS = """return [...document.querySelectorAll('[data-testid="stMetric"]')].map(m => [
  m.querySelector('[data-testid="stMetricLabel"]').innerText,
  m.querySelector('[data-testid="stMetricValue"]').innerText])"""
TABLES = """return [...document.querySelectorAll('[data-testid="stDataFrame"] table')].map(t => [
  [...t.querySelectorAll('thead th')].map(c => c.innerText),
  [...t.querySelectorAll('tbody tr')].map(
    r => [...r.querySelectorAll('td')].map(c => c.innerText))])"""
"""The glide grid's accessible table: the header and the rows it has drawn."""
AXES = """return [...document.querySelectorAll('[data-testid="stVegaLiteChart"] svg.marks')].map(
  s => [...s.querySelectorAll('g.role-axis[aria-label]')].map(a => a.getAttribute('aria-label')))"""
"""Per chart (Vega's SVG renderer), each axis's ARIA description: "Y-axis titled 'x (MHz)' ..."."""


@contextlib.contextmanager
def chromium(width: int = 1280, height: int = 1100) -> Iterator[WebDriver]:
    o = webdriver.ChromeOptions()
    o.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", "--hide-scrollbars"):  # fmt: skip
        o.add_argument(arg)
    # The browser in UTC, as the journal and the CLI: chart axes read the same times.
    d = webdriver.Chrome(service=Service(DRIVER, env={**os.environ, "TZ": "UTC"}), options=o)
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


def metrics(d: WebDriver) -> dict[str, str]:
    """Metric tiles, label -> value as shown."""
    return {str(k): str(v) for k, v in d.execute_script(METRICS)}


def tables(d: WebDriver) -> list[tuple[list[str], list[list[str]]]]:
    """Each table's header and drawn rows, as text."""
    return [(list(h), [list(r) for r in rows]) for h, rows in d.execute_script(TABLES)]


def table_with(d: WebDriver, *columns: str) -> list[dict[str, str]]:
    """The rows of the first table that has all `columns`, as dicts (AssertionError if none)."""
    for head, rows in tables(d):
        if set(columns) <= set(head):
            return [dict(zip(head, r, strict=False)) for r in rows]
    raise AssertionError(f"no table with columns {columns}: {[h for h, _ in tables(d)]}")


def axes(d: WebDriver) -> list[list[str]]:
    return [list(a) for a in d.execute_script(AXES)]


def time_range(axis: str) -> tuple[float, float]:
    """The first and last time of a Vega time axis's ARIA description ("... for a time scale
    with values from Thursday, 03 December 2026, 3:07:57 PM to ..."), in UTC."""
    m = re.search(r"values from (.+) to (.+)$", axis)
    assert m, axis
    fmt = "%A, %d %B %Y, %I:%M:%S %p"
    t0, t1 = (datetime.strptime(v, fmt).replace(tzinfo=UTC).timestamp() for v in m.groups())
    return t0, t1


def wait_for_row(
    d: WebDriver, columns: tuple[str, ...], wanted: Callable[[dict[str, str]], bool], timeout: float
) -> list[dict[str, str]]:
    """The rows of the first table with `columns` once one of them is `wanted` (a table draws
    after the script that made it ends)."""
    rows: list[dict[str, str]] = []

    def found(d: WebDriver) -> bool:
        nonlocal rows
        with contextlib.suppress(AssertionError):
            rows = table_with(d, *columns)
        return any(wanted(r) for r in rows)

    with contextlib.suppress(TimeoutException):
        WebDriverWait(d, timeout, poll_frequency=0.5).until(found)
    assert any(wanted(r) for r in rows), rows
    return rows
