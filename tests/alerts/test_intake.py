"""The Alertmanager webhook intake without Alertmanager: payload checks, label mapping, and
duplicate deliveries (an HA pair sends each notification once per replica, alertmanager #4108)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from alerts.am_intake import BadPayload, parse_time
from tests.alerts.conftest import Rig, post

T0 = 1_800_000_000.0


def payload(status: str = "firing", **labels: str) -> dict[str, Any]:
    return {
        "version": "4",
        "groupKey": '{}:{alertname="X"}',
        "status": status,
        "receiver": "gpufleet",
        "alerts": [
            {
                "status": status,
                "labels": {"alertname": "GPUXidErrors", "severity": "warning", **labels},
                "annotations": {"description": "XID 79"},
                "startsAt": "2026-01-15T08:00:00.123456789Z",
                "endsAt": "0001-01-01T00:00:00Z",
                "fingerprint": "c0ffee0123456789",
            }
        ],
    }


def test_label_mapping_and_duplicate_deliveries(rig) -> None:
    r: Rig = rig(am={"intake": {"kinds": {"GPUXidErrors": "gpu_xid"}}})
    server = r.rt.serve_webhook(port=0)
    try:
        body = json.dumps(
            payload(instance="h100-0007:9400", UUID="GPU-7", namespace="ml", job_name="llm")
        ).encode()
        for _ in range(2):  # both replicas of an HA pair deliver it
            assert post(server.url + "/alertmanager/webhook", body, {})[0] == 200
    finally:
        server.close()
    now = time.time()
    (f,) = r.rt.intake_findings(now)
    assert (f.kind.value, f.severity.value, f.node, f.gpu_uuid, f.job) == (
        "gpu_xid",
        "warning",
        "h100-0007",
        "GPU-7",
        "ml/llm",
    )
    assert f.summary == "XID 79" and f.first_seen == pytest.approx(
        parse_time("2026-01-15T08:00:00.123456Z")
    )
    (row,) = r.rt.intake.firing(now)
    assert row.deliveries == 2
    r.rt.intake.receive(payload("resolved"), now + 60)
    assert r.rt.intake_findings(now + 60) == []


def test_own_alerts_are_ignored_and_bad_payloads_refused(rig) -> None:
    r: Rig = rig()
    own = payload(kind="gpu_xid")
    own["alerts"][0]["labels"]["alertname"] = "GpufleetGpuXid"
    assert r.rt.intake.receive(own, T0).kept == 0  # none kept
    assert r.rt.intake_findings(T0) == []
    bads: list[Any] = [
        {"version": "3", "alerts": []},
        {"version": "4", "alerts": {}},
        {"version": "4", "alerts": [{"labels": "x"}]},
        {"version": "4", "alerts": [{"labels": {}, "status": "pending"}]},
        {"version": "4", "alerts": [{"labels": {}, "startsAt": "yesterday"}]},
        [],
    ]
    for bad in bads:
        with pytest.raises(BadPayload):
            r.rt.intake.receive(bad, T0)
