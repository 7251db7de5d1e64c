"""Fixtures for the alerts tests: a local Slack Web API server, a journal, an engine whose policy
asks for approval, and a runtime wired to them."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from alerts import AlertsRuntime, parse_alerts_config
from detectors.findings import Finding, FindingKind, Severity
from harness.slack_server import SlackServer
from remediations.decision_journal import DecisionJournal
from remediations.decisions import CycleResult
from remediations.policy import Policy, load_policy
from remediations.store import Store

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
APPROVER = "U0ALICE"

POLICY = """
version: 1
actuation: live
hysteresis: {open_after: 1, resolve_after: 1}
gates:
  blast_radius: {max_nodes: 1000, max_percent_of_pool: 100}
  breaker: {threshold_percent: 100, window: 5m, min_nodes: 100000}
  rate: {max_actions_per_hour: 100000}
  approval_timeout: 1h
intake:
  allow:
    - {kinds: [gpu_xid], severities: [critical, warning]}
rules:
  - name: cordon-xid
    match: {kinds: [gpu_xid], severities: [critical]}
    playbook: cordon
    mode: approval
"""


def approval_policy(tmp_path: Path) -> Policy:
    """The one policy of these tests (cordon on a critical XID, after a person approves)."""
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return load_policy(path)


@pytest.fixture
def slack() -> Iterator[SlackServer]:
    server = SlackServer()
    yield server
    server.close()


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'journal.db'}"


@pytest.fixture
def journal(db_url: str) -> Iterator[Store]:
    s = Store.open(db_url, cluster="test")
    yield s
    s.close()


def alerts_config(
    slack: SlackServer | None, am: dict[str, Any] | None = None, **slack_fields: Any
) -> Any:
    section: dict[str, Any] = {
        "slack": {
            "signing_secret": SECRET,
            "approvers": {"users": [APPROVER]},
            "default_channel": "C0FLEET",
            "timeout": 1,
            "dashboard_url": "http://dash.example/",
            **slack_fields,
        }
    }
    if am is not None:
        section["alertmanager"] = am
    if slack is not None:
        section["slack"].setdefault("token", "xoxb-test")
        section["slack"]["base_url"] = slack.url
    return parse_alerts_config(section, "test-config.yaml")


class Rig:
    """A journal, an engine and a runtime on one database (rebuilt to simulate a restart)."""

    def __init__(
        self,
        db_url: str,
        tmp_path: Path,
        slack: SlackServer | None,
        am: dict[str, Any] | None = None,
        **cfg: Any,
    ):
        self.db_url, self.tmp_path, self.slack, self.cfg, self.am = db_url, tmp_path, slack, cfg, am
        self.start()

    def start(self) -> None:
        self.store = Store.open(self.db_url, cluster="test")
        self.engine = DecisionJournal(approval_policy(self.tmp_path), self.store, started_at=0.0)
        config = alerts_config(self.slack, self.am, **self.cfg)
        self.rt = AlertsRuntime(config, self.store, self.engine)

    def restart(self) -> None:
        self.store.close()
        self.start()

    def cycle(self, findings: list[Finding], now: float) -> CycleResult:
        result = self.engine.cycle(findings, None, now)
        self.rt.on_cycle(result, now)
        return result

    def close(self) -> None:
        self.store.close()


@pytest.fixture
def rig(db_url: str, tmp_path: Path, slack: SlackServer) -> Iterator[Callable[..., Rig]]:
    made: list[Rig] = []

    def make(**cfg: Any) -> Rig:
        r = Rig(db_url, tmp_path, slack, **cfg)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def xid(node: str, gpu: int, t: float, severity: Severity = Severity.CRITICAL) -> Finding:
    return Finding(
        kind=FindingKind.GPU_XID,
        severity=severity,
        summary=f"XID 79 on {node} GPU {gpu}",
        first_seen=t,
        last_seen=t,
        node=node,
        gpu_uuid=f"GPU-{node}-{gpu}",
        evidence={"xid": 79},
    )


# ---- signed requests ---------------------------------------------------------------------------


def sign(body: bytes, ts: int | None = None, secret: str = SECRET) -> dict[str, str]:
    t = str(int(time.time()) if ts is None else ts)
    mac = hmac.new(secret.encode(), b"v0:" + t.encode() + b":" + body, hashlib.sha256)
    return {"X-Slack-Request-Timestamp": t, "X-Slack-Signature": "v0=" + mac.hexdigest()}


def click_body(action_id: str, user: str = APPROVER, verb: str = "gpufleet_approve") -> bytes:
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower()},
        "channel": {"id": "C0FLEET"},
        "actions": [{"action_id": verb, "value": action_id}],
    }
    return urllib.parse.urlencode({"payload": json.dumps(payload)}).encode()


def slash_body(text: str, user: str = APPROVER) -> bytes:
    form = {"command": "/gpufleet", "text": text, "user_id": user, "user_name": user.lower()}
    return urllib.parse.urlencode(form).encode()


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


from tests.remediations.conftest import pg_url  # noqa: E402, F401  (the PostgreSQL fixture)
