"""Alertmanager both ways, against the real Debian `prometheus-alertmanager`: its webhook posts
to gpufleet's intake (findings appear once, resolve when the alert does), and gpufleet's
incidents posted to it show in its API, grouped by its routing, and end when they resolve."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from alerts.am_output import rfc3339
from tests.alerts.alertmanager_fixture import TOKEN, Alertmanager, alertmanager, available
from tests.alerts.conftest import Rig, xid

pytestmark = pytest.mark.skipif(not available(), reason="prometheus-alertmanager not installed")

INTAKE = {"bearer_token": TOKEN, "kinds": {"GPUXidErrors": "gpu_xid"}}


def wait(cond: Callable[[], Any], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError("timed out waiting")


def prom_alert(name: str, host: str, uuid: str, ends: float | None = None) -> dict[str, Any]:
    alert: dict[str, Any] = {
        "labels": {"alertname": name, "severity": "critical", "Hostname": host, "UUID": uuid},
        "annotations": {"summary": f"{name} on {host}"},
        "startsAt": rfc3339(time.time() - 60),
    }
    if ends is not None:
        alert["endsAt"] = rfc3339(ends)
    return alert


@pytest.fixture
def am_rig(rig, tmp_path: Path) -> Iterator[tuple[Rig, Alertmanager]]:
    r: Rig = rig(am={"intake": INTAKE, "validity": 120})
    server = r.rt.serve_webhook(port=0)
    try:
        with alertmanager(tmp_path, server.url + "/alertmanager/webhook") as am:
            r.am = {"intake": INTAKE, "validity": 120, "url": am.url}
            r.restart()  # the same journal, now with the output URL
            yield r, am
    finally:
        server.close()


def test_intake_from_real_alertmanager_once_per_alert(am_rig: tuple[Rig, Alertmanager]) -> None:
    r, am = am_rig
    a1 = prom_alert("GPUXidErrors", "h100-0001", "GPU-1")
    a2 = prom_alert("GPUTooHot", "h100-0002", "GPU-2")
    am.post_alerts([a1, a2])
    am.post_alerts([a1])  # Prometheus re-sends every evaluation
    found = wait(
        lambda: len(r.rt.intake_findings(time.time())) == 2 and r.rt.intake_findings(time.time())
    )
    time.sleep(1.5)  # another group_interval: still exactly one finding per alert
    findings = sorted(r.rt.intake_findings(time.time()), key=lambda f: f.node or "")
    assert [(f.kind.value, f.node, f.gpu_uuid) for f in findings] == [
        ("gpu_xid", "h100-0001", "GPU-1"),
        ("anomaly", "h100-0002", "GPU-2"),
    ]
    assert found and findings[0].severity.value == "critical"
    assert findings[0].evidence["source"] == "alertmanager"

    # an incident from it opens once, and is not sent back to Alertmanager (no loop)
    now = time.time()
    result = r.cycle(r.rt.intake_findings(now), now)
    assert sum(c.change.value == "opened" for c in result.changes) == 2
    r.rt.run_outbox(now)
    assert not [
        a for a in am.get("/api/v2/alerts") if a["labels"]["alertname"].startswith("Gpufleet")
    ]

    am.post_alerts([prom_alert("GPUXidErrors", "h100-0001", "GPU-1", ends=time.time() - 1)])
    wait(lambda: len(r.rt.intake_findings(time.time())) == 1)
    (left,) = r.rt.intake_findings(time.time())
    assert left.node == "h100-0002"


def test_intake_refuses_a_webhook_without_the_token(am_rig: tuple[Rig, Alertmanager]) -> None:
    import json

    from tests.alerts.conftest import post

    r, _ = am_rig
    server = r.rt.serve_webhook(port=0)
    try:
        body = json.dumps({"version": "4", "alerts": []}).encode()
        assert post(server.url + "/alertmanager/webhook", body, {})[0] == 401
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert post(server.url + "/alertmanager/webhook", b"[1]", auth)[0] == 400
        assert post(server.url + "/alertmanager/webhook", body, auth)[0] == 200
    finally:
        server.close()


def test_output_to_real_alertmanager_grouped_and_ended(am_rig: tuple[Rig, Alertmanager]) -> None:
    r, am = am_rig
    now = time.time()
    r.cycle([xid("n1", 0, now), xid("n1", 1, now), xid("n2", 0, now)], now)
    assert r.rt.run_outbox(now) >= 3

    def ours() -> list[dict[str, Any]]:
        return [
            a for a in am.get("/api/v2/alerts") if a["labels"]["alertname"].startswith("Gpufleet")
        ]

    alerts = wait(lambda: len(ours()) == 3 and ours())
    labels = sorted((a["labels"]["node"], a["labels"]["gpu"]) for a in alerts)
    assert labels == [("n1", "GPU-n1-0"), ("n1", "GPU-n1-1"), ("n2", "GPU-n2-0")]
    one = alerts[0]["labels"]
    assert one["kind"] == "gpu_xid" and one["severity"] == "critical" and one["cluster"] == "test"
    assert alerts[0]["receivers"][0]["name"] == "oncall"

    def groups() -> dict[str, int]:
        return {
            g["labels"].get("node", ""): len(g["alerts"])
            for g in am.get("/api/v2/alerts/groups")
            if g["receiver"]["name"] == "oncall"
        }

    assert wait(lambda: groups() == {"n1": 2, "n2": 1})  # grouped by its own routing

    # re-sent before it lapses (validity 120 s: again after 60 s)
    assert r.rt.am_output.push(now + 30) == 0
    assert r.rt.am_output.push(now + 61) == 3

    # n1's incidents resolve: ended in Alertmanager; n2's stays
    later = time.time()
    r.cycle([xid("n2", 0, later)], later)
    assert r.rt.am_output.push(later) == 2
    left = wait(lambda: len(ours()) == 1 and ours())
    assert left[0]["labels"]["node"] == "n2"
