"""`gpufleet run` end to end against the simulator: several cycles see findings; a critical
fault is quarantined automatically and its drain waits for approval; the maintenance window
drains the node with a warning-level hardware incident only inside its window; the quarantined
node is diagnosed by a batch/v1 Job, which fails while its DBE fault persists, so it stays out
of service, marked for hardware replacement. Scheduled runs go through
APScheduler (`run_once_now`) and the store's once-per-fire claim like cron fires do."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gpufleet.config import GpufleetConfig
from gpufleet.live_cycle import CycleReport
from gpufleet.service.assembly import build
from gpufleet.service.runtime import Service
from harness.k8s_sim import small_scenario
from harness.live_policy import QUARANTINE_CRITICAL, live_policy
from harness.slack_server import SlackServer
from observer.scrape.collector import ScrapeSettings
from remediations.policy import Policy
from remediations.scheduled.diagnose import REPLACEMENT_LABEL
from remediations.store import Store
from remediations.types import QUARANTINE_LABEL
from simulator.serve import SimulationHandle, start_simulation
from tests.service.procs import wait_for

pytestmark = pytest.mark.slow
SPEED = 20.0
SPANS = InMemorySpanExporter()
REPORTS: list[CycleReport] = []


def e2e_policy() -> Policy:
    drain = {**QUARANTINE_CRITICAL, "name": "drain-critical", "playbook": "drain"}
    return live_policy([QUARANTINE_CRITICAL, {**drain, "mode": "approval"}])


@pytest.fixture
def handle(tmp_path: Path) -> Iterator[SimulationHandle]:
    sc = small_scenario(
        faults=[
            {"kind": "xid48_dbe", "node": "h100-0001", "gpu": 1, "start": "1m"},
            {"kind": "thermal_throttle", "node": "h100-0002", "gpu": 2, "start": "1m"},
        ],
        diagnostics={"h100-0001": "pass"},
        diagnostic_seconds=60,
    ).model_copy(update={"start": float(int(time.time()))})
    h = start_simulation(sc, speed=SPEED, kubeconfig_out=tmp_path / "kubeconfig")
    yield h
    h.stop()


@pytest.fixture
def slack() -> Iterator[SlackServer]:
    server = SlackServer()
    yield server
    server.close()


@pytest.fixture
def service(handle: SimulationHandle, tmp_path: Path, slack: SlackServer) -> Iterator[Service]:
    cfg = GpufleetConfig.model_validate(
        {
            "cluster": "small",
            "store_url": f"sqlite:///{tmp_path / 'j.db'}",
            "service": {
                "http": {"port": 0},
                "schedule": [
                    {"name": "mw", "kind": "maintenance_window", "cron": "0 0 1 1 *",
                     "misfire_grace": "2h", "params": {"window": "60s"}},
                    {"name": "diag", "kind": "diagnose_and_return", "cron": "0 0 1 1 *",
                     "misfire_grace": "2h",
                     "params": {"wait": "20s", "poll": 0.2, "require_idle": False}},
                ],
            },
            "alerts": {
                "slack": {"token": "xoxb-test", "base_url": slack.url, "timeout": 2,
                          "default_channel": "C0FLEET", "signing_secret": "s3cret",
                          "approvers": {"users": ["U0ALICE"]}},
                "http": {"enabled": True, "port": 0},
            },
        }
    )  # fmt: skip
    store = Store.open(cfg.store_url, cluster="small")
    parts, _ = build(
        cfg,
        e2e_policy(),
        "e2e",
        store=store,
        kubeconfig=str(handle.kubeconfig),
        scrape=ScrapeSettings(discovery_url=f"{handle.metrics_url}/targets", cluster="small"),
        clock=handle.clock,
        interval=handle.scenario.scrape_interval / SPEED,
        speed=SPEED,
    )
    parts.telemetry.tracer_provider.add_span_processor(SimpleSpanProcessor(SPANS))
    REPORTS.clear()
    parts.on_report = REPORTS.append
    svc = Service(parts).start()
    yield svc
    assert svc.shutdown() == 0


def _node(handle: SimulationHandle, name: str) -> dict[str, object]:
    return handle.cluster.get("nodes", "", name)["spec"]  # type: ignore[no-any-return]


def test_run_end_to_end(service: Service, handle: SimulationHandle, slack: SlackServer) -> None:
    store = service.p.store
    entries = {e.name: e for e in service.entries}

    def states(rule: str) -> dict[str, str]:
        return {
            f"{a.playbook} {a.target}": a.state.value for a in store.actions() if a.rule == rule
        }

    wait_for(
        lambda: states("quarantine-critical").get("quarantine node/h100-0001") == "done",
        60, "the automatic quarantine", 0.3,
    )  # fmt: skip
    # (an XID is an event: the cycle that saw it has findings, later ones may not)
    assert any(r.findings for r in REPORTS)
    assert states("drain-critical") == {"drain node/h100-0001": "awaiting_approval"}

    # Slack: the node's incident message and the drain's approval prompt, through the outbox.
    def prompt_posted() -> bool:
        text = json.dumps(slack.posted("C0FLEET"))
        return "h100-0001" in text and "approve" in text.lower()

    wait_for(prompt_posted, 30, "the Slack message and approval prompt for h100-0001", 0.3)
    wait_for(
        lambda: any(
            i.kind == "gpu_throttle" and i.severity == "warning" and i.node == "h100-0002"
            for i in store.open_incidents()
        ),
        60, "the warning-level throttle incident", 0.3,
    )  # fmt: skip

    assert service.p.live.cycles >= 3
    # A window that opened ten minutes ago and closed after one: the late run drains nothing.
    now = time.time()
    service.scheduler.run_once_now(entries["mw"], now - 600)
    wait_for(lambda: any("mw (maintenance_window)" in r.message for r in store.audit_log()),
             20, "the late maintenance run")  # fmt: skip
    assert states("schedule:mw") == {}
    assert not _node(handle, "h100-0002").get("unschedulable")
    # Inside the window: drained through the gates and the journal.
    service.scheduler.run_once_now(entries["mw"], now - 1)
    wait_for(lambda: states("schedule:mw") == {"drain node/h100-0002": "done"}, 30,
             "the maintenance drain")  # fmt: skip
    assert _node(handle, "h100-0002")["unschedulable"] is True

    # Diagnostics on the quarantined node: its double-bit errors persist (nothing reset the
    # GPU), so `dcgmi diag` fails whatever the scenario hoped: it stays out of service, marked
    # for hardware replacement, and a person is told (never returned with its fault open).
    service.scheduler.run_once_now(entries["diag"], time.time() - 1)
    wait_for(lambda: states("schedule:diag") == {"mark_replacement node/h100-0001": "done"}, 40,
             "diagnose, keep and mark for replacement", 0.3)  # fmt: skip
    node = handle.cluster.get("nodes", "", "h100-0001")
    assert node["spec"].get("unschedulable") is True
    assert QUARANTINE_LABEL in node["metadata"].get("labels", {})
    assert REPLACEMENT_LABEL in node["metadata"].get("labels", {})
    assert [r.target for r in store.audit_log() if r.kind == "needs_person"] == ["node/h100-0001"]
    assert len(handle.cluster.store.objects("jobs", "gpufleet-jobs")[1]) == 1
    names = {s.name for s in SPANS.get_finished_spans()}
    for span in ("cycle", "collect", "detect", "detector:gpu_xid", "remediate", "k8s:cordon",
                 "k8s:evict_pods", "k8s:label", "schedule:mw", "schedule:diag"):  # fmt: skip
        assert span in names, (span, sorted(names))
    runs = {r.job: r for r in service.jobs.runs.all()}
    assert runs["mw"].runs == 2 and runs["diag"].runs == 1 and runs["diag"].last_ok
