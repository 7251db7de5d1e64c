"""The running demo in a real browser: `gpufleet run --embedded` (what `make demo` runs: the
simulator, the service on the demo's own Prometheus, the Streamlit dashboard) on free ports, and
headless Chromium reading its pages as a person would.

- One clock: the pending drain was "asked" no longer ago than the demo has run and stays open for
  a day; the audit trail's rows are in id order and stamped within the run; metering's GPU-hours
  (Utilization & cost, Fleet) are at most the fleet's allocated GPUs times the run's wall time
  (a 20x clock would show twenty times that); the Fleet trend's steps lie within the run; the
  latest cycle is seconds old.
- What-if, with its default window (the last hour, older than the demo's Prometheus), replays
  that Prometheus and finds the demo's XID 48.
- Approve on the Remediation page, and the drain evicts the notebook's pods from a100-0002, as
  the simulated Kubernetes API shows; the ReplicaSet recreates them on another node. The done
  drain's outcome (journal, `gpufleet actions show`, Remediation history) names the pods and node.
- The Fleet trend's values (read off its drawn lines): 64 of 96 GPUs allocated in every step.
- The throttled GPU's incident draws each metric the detector read in its own chart and units;
  the node's second incident (gpu_memory beside gpu_xid) shows the drain it joined.

The demo's scenario with its first two faults moved to keep the test short: the thermal throttle
from the start (`--warmup 0`; it is notify-only and must persist a minute before it is a
finding) and the XID 48 45 s later, after the service's first cycle, so it is seen arriving.
The service cycles every 10 s (the demo's 30 s), and the test waits on conditions, never on
the cycle's log lines. The run refreshes the README's screenshots (docs/screenshots/). One
test, one demo: it starts once per `make test`.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from gpufleet.cli import main
from gpufleet.demo.embedded import DEMO_CONFIG
from remediations.store import ActionRecord, Store
from remediations.types import ActionState
from simulator.scenario import LIVE_DEMO_SCENARIO
from tests.browser import (
    CUT_OFF,
    HAVE_CHROMIUM,
    axes,
    chromium,
    metrics,
    settle,
    table_with,
    time_range,
    wait_for_row,
)
from tests.service.demo_proc import Demo

SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
ALLOCATED_GPUS = 64
"""GPUs the demo's pods hold: llama-pretrain 32, bert-finetune 16, chat-serve 8, notebook 8."""
INTERVAL = 10.0
"""The test demo's cycle, in seconds (the demo's is 30): metering's first cycle counts one
interval back. Shorter cycles see the XID and the eviction sooner: the test takes less time."""
FLEET_GPUS = 96

pytestmark = [
    pytest.mark.slow,
    pytest.mark.prometheus,
    pytest.mark.skipif(not HAVE_CHROMIUM, reason="needs Debian chromium and chromium-driver"),
    pytest.mark.skipif(not shutil.which("prometheus"), reason="needs Debian prometheus"),
]


def scenario(tmp: Path) -> Path:
    sc = yaml.safe_load(LIVE_DEMO_SCENARIO.read_text())
    for f in sc["faults"]:
        if f["kind"] == "thermal_throttle":
            f["start"] = "60s"  # persists its minute while the service starts
        if f["kind"] == "xid48_dbe":
            f["start"] = "105s"  # after the first cycle: seen arriving, quarantined at once
    out = tmp / "demo-live.yaml"
    out.write_text(yaml.safe_dump(sc))
    return out


def config(tmp: Path) -> Path:
    """The demo's config with a 10 s cycle."""
    cfg = yaml.safe_load(DEMO_CONFIG.read_text())
    cfg["service"]["interval"] = f"{INTERVAL:g}s"
    out = tmp / "demo.yaml"
    out.write_text(yaml.safe_dump(cfg))
    return out


def trend_lines(d: WebDriver) -> list[list[float]]:
    """The Fleet trend's lines as values on its y axis: each line's points in screen pixels,
    mapped through the y axis's tick labels (Vega's SVG draws no values a test could read)."""
    lines = d.execute_script(TREND_LINES)
    assert lines, "no trend drawn"
    ticks, paths = lines
    assert len(ticks) >= 2, ticks
    (v0, y0), (v1, y1) = ticks[0], ticks[-1]
    return [[v0 + (y - y0) * (v1 - v0) / (y1 - y0) for y in path] for path in paths]


TREND_LINES = """
const chart = [...document.querySelectorAll('[data-testid="stVegaLiteChart"] svg.marks')].find(
  s => [...s.querySelectorAll('g.role-axis[aria-label]')].some(
    a => a.getAttribute('aria-label').includes("titled '% of GPUs'")));
if (!chart) return null;
const yaxis = [...chart.querySelectorAll('g.role-axis[aria-label]')].find(
  a => a.getAttribute('aria-label').startsWith('Y-axis'));
const mid = e => { const r = e.getBoundingClientRect(); return r.top + r.height / 2; };
const ticks = [...yaxis.querySelectorAll('g.role-axis-label text')].map(
  t => [parseFloat(t.textContent.replace(/,/g, '')), mid(t)]);
const paths = [...chart.querySelectorAll('g.mark-line path')].map(p => {
  const m = p.getScreenCTM(), n = p.getTotalLength(), out = [];
  for (let i = 0; i <= 20; i++) {
    const q = p.getPointAtLength(n * i / 20);
    out.push(m.b * q.x + m.d * q.y + m.f);
  }
  return out;
});
return [ticks, paths];"""


def utc(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()


def gpu_hours(text: str) -> float:
    return float(text.split()[0].replace(",", ""))


def text(d: WebDriver) -> str:
    return str(d.execute_script("return document.body.innerText"))


def page(d: WebDriver, url: str, path: str, title: str, shot: str | None = None) -> None:
    d.get(f"{url}/{path}")
    settle(d, title, timeout=45.0)
    assert not d.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]'), path
    assert not d.execute_script(CUT_OFF), path
    if shot is not None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        d.save_screenshot(str(SHOTS / f"{shot}.png"))


def notebook_pods(kubeconfig: Path) -> dict[str, str]:
    """The notebook's pods in the simulated cluster, name -> node."""
    api = k8s_config.new_client_from_config(config_file=str(kubeconfig))
    try:
        pods = k8s.CoreV1Api(api).list_namespaced_pod("research").items
    finally:
        api.close()
    out: dict[str, str] = {}
    for p in pods:
        meta, spec = p.metadata, p.spec
        assert meta is not None and meta.name is not None and spec is not None
        if meta.name.startswith("notebook") and meta.deletion_timestamp is None:
            out[meta.name] = str(spec.node_name)
    return out


def whatif(d: WebDriver, url: str) -> bool:
    """Run What-if with its default window and policy at 15 s steps (the Step box, as a person
    picks it); True when its findings name a100-0002's XID."""
    page(d, url, "whatif", "What-if")
    d.find_element(By.CSS_SELECTOR, '.st-key-wi_step button[aria-label="Open"]').click()
    WebDriverWait(d, 10, poll_frequency=0.2).until(
        lambda d: [
            o for o in d.find_elements(By.CSS_SELECTOR, '[role="option"]') if o.text == "15 s"
        ]
    )[0].click()
    step = (By.CSS_SELECTOR, ".st-key-wi_step input")
    WebDriverWait(d, 10, poll_frequency=0.2).until(
        lambda d: d.find_element(*step).get_attribute("value") == "15 s"
    )
    settle(d, "What-if")
    d.find_element(By.CSS_SELECTOR, ".st-key-wi_run button").click()
    WebDriverWait(d, 120, poll_frequency=0.5).until(
        lambda d: (
            d.find_elements(By.CSS_SELECTOR, '[data-testid="stAlertContentSuccess"]')
            or d.find_elements(By.CSS_SELECTOR, '[data-testid="stAlertContentError"]')
        )
    )
    assert not d.find_elements(By.CSS_SELECTOR, '[data-testid="stAlertContentError"]')
    with contextlib.suppress(AssertionError):
        wait_for_row(
            d,
            ("kind", "severity", "node", "first_seen"),
            lambda r: r["kind"] == "gpu_xid" and r["node"] == "a100-0002",
            10,
        )
        return True
    return False


def wait_done(url: str, action_id: str, timeout: float) -> ActionRecord:
    """The action (`action_id`: a prefix) once the journal has it done (AssertionError with
    its state if not)."""
    deadline = time.monotonic() + timeout
    while True:
        store = Store.open(url, cluster="demo")
        try:
            (a,) = store.find_actions(action_id)  # the demo prints an id's first characters
        finally:
            store.close()
        if a.state is ActionState.DONE or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert a.state is ActionState.DONE, a
    return a


def test_the_running_demo_tells_one_story_in_the_browser(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    launched = time.time()
    demo = Demo(
        tmp_path, "--scenario", str(scenario(tmp_path)), "--warmup", "0",
        "--config", str(config(tmp_path)),
    )  # fmt: skip
    try:
        with chromium() as d:
            url = demo.find(r"Dashboard: (http://\S+)", 90).group(1)
            demo.wait_for("prometheus    http://", 90)
            drain = demo.find(r"action   (\w+) drain node/a100-0002: awaiting approval", 150)
            before = notebook_pods(demo.kubeconfig)
            assert sorted(before.values()) == ["a100-0002", "a100-0002"], before

            # One clock: ages, expiry and the audit trail's order read the wall clock.
            page(d, url, "remediation", "Remediation", shot="remediation")
            now = time.time()
            card = d.find_element(By.CSS_SELECTOR, f'[class*="st-key-approve_{drain.group(1)}"]')
            queue = text(d)
            asked = re.search(r"asked (\d+)(s|m) ago", queue)
            assert asked and asked.group(2) == "s", queue
            assert int(asked.group(1)) <= now - launched, (queue, now - launched)
            expires = re.search(r"expires (\S+ \S+)", queue)
            assert expires and utc(expires.group(1)) > now + 23 * 3600, queue
            trail = wait_for_row(d, ("id", "at", "actor", "message"), lambda r: True, 20)
            ids, ats = [int(r["id"]) for r in trail], [utc(r["at"]) for r in trail]
            assert len(trail) >= 5 and ids == sorted(ids, reverse=True)
            assert ats == sorted(ats, reverse=True), trail  # newest first, by id and by time
            assert launched - 1 <= min(ats) and max(ats) <= now + 1, (launched, ats)

            card.find_element(By.TAG_NAME, "button").click()  # Approve

            # The approved drain evicts the notebook's real pods; its ReplicaSet recreates them.
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                after = notebook_pods(demo.kubeconfig)
                if len(after) == 2 and "a100-0002" not in after.values():
                    break
                time.sleep(0.5)
            assert len(after) == 2 and "a100-0002" not in after.values(), after
            assert not set(after) & set(before)  # new pods, not the evicted ones rescheduled
            # Its outcome says what it evicted from where: journal, CLI and dashboard.
            done = wait_done(demo.store_url, drain.group(1), 60)
            evicted = ", ".join(f"research/{p}" for p in sorted(before))
            said = f"evicted 2 pod(s) from a100-0002 ({evicted}); none left"
            assert done.result == said, done.result
            cfg = tmp_path / "cli.yaml"
            cfg.write_text(f"store_url: '{demo.store_url}'\ncluster: demo\n")
            assert main(["actions", "show", done.id, "--config", str(cfg)]) == 0
            assert f"done ({said})" in capsys.readouterr().out
            deadline = time.monotonic() + 30  # the page's journal reads are cached seconds
            while True:
                page(d, url, "remediation", "Remediation", shot="remediation-approved")
                history = table_with(d, "outcome")
                if any(said in r["outcome"] for r in history) or time.monotonic() > deadline:
                    break
                time.sleep(2)
            assert any(said in r["outcome"] for r in history), history
            assert any("approved by dashboard (no login)" in r["outcome"] for r in history), history

            # Metering on the same clock: GPU-hours no more than the pods held in wall time (and
            # the first cycle's interval before it), where a 20x clock showed twenty times that.
            elapsed_h = (time.time() - launched + INTERVAL) / 3600.0
            page(d, url, "utilization", "Utilization & cost", shot="utilization")
            allocated = gpu_hours(metrics(d)["GPU-hours allocated"])
            assert 0 < allocated <= ALLOCATED_GPUS * elapsed_h, (allocated, elapsed_h)
            page(d, url, "", "Fleet", shot="fleet")
            tiles = metrics(d)
            assert gpu_hours(tiles["Idle allocated today"]) <= allocated
            assert re.search(r"Latest cycle \d+s ago", text(d)), text(d)
            # The trend's 5-minute steps lie within the run (a 20x clock put them hours ahead).
            (trend,) = [c for c in axes(d) if any("titled '% of GPUs'" in a for a in c)]
            first, last = time_range(next(a for a in trend if a.startswith("X-axis")))
            assert launched - 300 <= first <= last <= time.time(), (launched, first, last)
            # Its values agree with the fleet: 64 of 96 GPUs allocated in every step (a count
            # over a part-filled step drew a false ramp), busy never above allocated.
            lines = trend_lines(d)
            share = 100.0 * ALLOCATED_GPUS / FLEET_GPUS
            assert len(lines) == 2 and all(lines), lines  # allocated and busy, drawn
            held = max(lines, key=max)
            assert all(abs(v - share) < 2.0 for v in held), (lines, share)
            assert all(v <= share + 2.0 for line in lines for v in line), lines
            page(d, url, "jobs", "Jobs", shot="jobs")
            page(d, url, "policy", "Policy")

            # Evidence: each metric the throttle detector read in its own chart and unit.
            throttle = demo.find(r"incident opened (\w+) warning gpu_throttle h200-0001", 150)
            memory = demo.find(r"incident opened (\w+) critical gpu_memory a100-0002", 1)
            store = Store.open(demo.store_url, cluster="demo")
            try:
                (incident,) = store.find_incidents(throttle.group(1))
                (merged,) = store.find_incidents(memory.group(1))
            finally:
                store.close()
            # The second incident of the node joined the first's drain: its header says so.
            page(d, url, f"incidents?incident={merged.id}", "Incidents")
            assert "drain on node/a100-0002" in text(d), text(d)
            assert "the policy only notifies" not in text(d)
            d.set_window_size(1280, 2700)  # the screenshot shows the evidence below the table
            page(d, url, f"incidents?incident={incident.id}", "Incidents", shot="incidents")
            d.set_window_size(1280, 1100)
            titles = [re.search(r"Y-axis titled '([^']+)'", a) for c in axes(d) for a in c]
            ys = [t.group(1) for t in titles if t is not None]
            for field, u in (("SM_CLOCK", "MHz"), ("GPU_TEMP", "°C"), ("GPU_UTIL", "%")):
                assert f"DCGM_FI_DEV_{field} ({u})" in ys, ys

            # What-if, default window (the last hour) on the demo's own Prometheus. The replay
            # confirms the XID on its second step, as the live cycle does: run it again (the
            # window reaches the current minute) until that step is in Prometheus.
            deadline = time.monotonic() + 90
            while True:
                found = whatif(d, url)
                if found or time.monotonic() > deadline:
                    break
                time.sleep(5)
            assert found, "What-if never found a100-0002's XID"
            SHOTS.mkdir(parents=True, exist_ok=True)
            d.save_screenshot(str(SHOTS / "whatif.png"))

        assert demo.stop() == 0
    finally:
        demo.kill()
