"""Approve/Reject buttons and `/gpufleet` over signed HTTP: accepted when signed by Slack and
pressed by an approver; forged, expired, unsigned, replayed, malformed and unauthorised requests
change nothing in the journal; double clicks are idempotent; prompts survive a restart."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from harness.slack_server import SlackServer
from remediations.types import ActionState
from tests.alerts.conftest import (
    APPROVER,
    Rig,
    click_body,
    post,
    sign,
    slash_body,
    xid,
)


@pytest.fixture
def pending(rig) -> Iterator[tuple[Rig, str, Any]]:
    """A journal with one cordon awaiting approval, its prompt posted, endpoints served."""
    r: Rig = rig()
    now = time.time()
    r.cycle([xid("n1", 0, now)], now)
    r.rt.run_outbox(now)
    (action,) = r.store.actions([ActionState.AWAITING_APPROVAL])
    server = r.rt.serve(port=0)
    yield r, action.id, server
    server.close()


def journal(r: Rig) -> tuple[list[dict[str, Any]], int]:
    return [a.to_json() for a in r.store.actions()], len(r.store.audit_log())


def test_signed_click_by_an_approver_approves_through_the_engine(
    pending: tuple[Rig, str, Any], slack: SlackServer
) -> None:
    r, action_id, server = pending
    body = click_body(action_id)
    status, _ = post(server.url + "/slack/interactions", body, sign(body))
    assert status == 200
    a = r.store.get_action(action_id)
    assert a is not None and a.state is ActionState.APPROVED
    assert a.approved_by == f"slack:{APPROVER} (u0alice)"
    trail = [x for x in r.store.audit_log() if x.action_id == action_id and x.kind == "approval"]
    assert len(trail) == 1 and trail[0].actor.startswith("slack:U0ALICE")
    r.rt.run_outbox(time.time())
    prompt = r.rt.astore.prompt(action_id)
    assert prompt is not None and prompt.ts and prompt.state == "approved"
    updates = slack.calls("chat.update", ok_only=True)
    updated = [c for c in updates if c.body["ts"] == prompt.ts]
    assert updated and "approved by <@U0ALICE> at" in updated[-1].body["text"]
    assert "actions" not in str(updated[-1].body["blocks"])  # no buttons left
    ephemeral = slack.calls("chat.postEphemeral", ok_only=True)
    assert ephemeral and ephemeral[-1].body["user"] == APPROVER


def test_reject_button(pending: tuple[Rig, str, Any]) -> None:
    r, action_id, server = pending
    body = click_body(action_id, verb="gpufleet_reject")
    assert post(server.url + "/slack/interactions", body, sign(body))[0] == 200
    a = r.store.get_action(action_id)
    assert a is not None and a.state is ActionState.REJECTED


@pytest.mark.parametrize(
    "case", ["forged", "expired", "unsigned", "future", "bad_timestamp", "other_body"]
)
def test_refused_requests_change_nothing(pending: tuple[Rig, str, Any], case: str) -> None:
    r, action_id, server = pending
    before = journal(r)
    body = click_body(action_id)
    headers = {
        "forged": sign(body, secret="not-the-secret"),
        "expired": sign(body, ts=int(time.time()) - 301),
        "future": sign(body, ts=int(time.time()) + 301),
        "unsigned": {},
        "bad_timestamp": {**sign(body), "X-Slack-Request-Timestamp": "soon"},
        "other_body": sign(click_body(action_id, verb="gpufleet_reject")),
    }[case]
    status, _ = post(server.url + "/slack/interactions", body, headers)
    assert status == 401
    assert journal(r) == before


def test_replayed_request_is_refused(pending: tuple[Rig, str, Any]) -> None:
    r, action_id, server = pending
    body = click_body(action_id, verb="gpufleet_reject")
    headers = sign(body)
    assert post(server.url + "/slack/interactions", body, headers)[0] == 200
    after_first = journal(r)
    assert post(server.url + "/slack/interactions", body, headers)[0] == 401
    assert journal(r) == after_first


def test_malformed_payload_is_refused(pending: tuple[Rig, str, Any]) -> None:
    r, _, server = pending
    before = journal(r)
    for body in (b"payload=%7Bnot+json", b"payload=%7B%7D", b"\xff\xfe", b"nothing=here"):
        assert post(server.url + "/slack/interactions", body, sign(body))[0] == 400
    assert journal(r) == before


def test_unauthorised_clicker_is_told_and_nothing_changes(
    pending: tuple[Rig, str, Any], slack: SlackServer
) -> None:
    r, action_id, server = pending
    before = journal(r)
    body = click_body(action_id, user="U0MALLORY")
    assert post(server.url + "/slack/interactions", body, sign(body))[0] == 200
    assert journal(r) == before
    r.rt.run_outbox(time.time())
    (told,) = slack.calls("chat.postEphemeral", ok_only=True)
    assert (
        told.body["user"] == "U0MALLORY" and "not on gpufleet's approver list" in told.body["text"]
    )


def test_double_click_is_idempotent(pending: tuple[Rig, str, Any], slack: SlackServer) -> None:
    r, action_id, server = pending
    first = click_body(action_id)
    assert post(server.url + "/slack/interactions", first, sign(first))[0] == 200
    after = journal(r)
    again = click_body(action_id, verb="gpufleet_reject")  # a different, later click
    assert post(server.url + "/slack/interactions", again, sign(again))[0] == 200
    assert journal(r) == after
    r.rt.run_outbox(time.time())
    texts = [c.body["text"] for c in slack.calls("chat.postEphemeral", ok_only=True)]
    assert "already approved by <@U0ALICE>" in texts[-1]


def test_usergroup_allowlist_and_fail_closed(rig, slack: SlackServer) -> None:
    slack.state.groups["S0OPS"] = ["U0BOB"]
    r: Rig = rig(approvers={"usergroup": "S0OPS"})
    assert r.rt.interactions.authorised("U0BOB")
    assert not r.rt.interactions.authorised("U0MALLORY")
    r2: Rig = rig(approvers={"usergroup": "S0GONE"})  # lookup fails: nobody
    assert not r2.rt.interactions.authorised("U0BOB")
    r3: Rig = rig(approvers={})  # no list at all: nobody
    assert not r3.rt.interactions.authorised(APPROVER)


def test_expired_prompt_cannot_be_approved(rig, slack: SlackServer) -> None:
    r: Rig = rig(approval_ttl=60)
    t0 = time.time() - 120  # the prompt was posted two minutes ago, TTL one minute
    r.cycle([xid("n1", 0, t0)], t0)
    r.rt.run_outbox(t0)
    (action,) = r.store.actions([ActionState.AWAITING_APPROVAL])
    server = r.rt.serve(port=0)
    try:
        before = journal(r)
        body = click_body(action.id)
        assert post(server.url + "/slack/interactions", body, sign(body))[0] == 200
        assert journal(r) == before
    finally:
        server.close()
    r.cycle([xid("n1", 0, time.time())], time.time())  # the next cycle shows it expired
    r.rt.run_outbox(time.time())
    assert any("expired" in c.body["text"] for c in slack.calls("chat.update", ok_only=True))


def test_pending_approval_survives_a_restart(rig, slack: SlackServer) -> None:
    r: Rig = rig()
    now = time.time()
    r.cycle([xid("n1", 0, now)], now)
    r.rt.run_outbox(now)
    (action,) = r.store.actions([ActionState.AWAITING_APPROVAL])
    r.restart()
    server = r.rt.serve(port=0)
    try:
        body = click_body(action.id)
        assert post(server.url + "/slack/interactions", body, sign(body))[0] == 200
    finally:
        server.close()
    a = r.store.get_action(action.id)
    assert a is not None and a.state is ActionState.APPROVED
    r.cycle([xid("n1", 0, now + 30)], now + 30)
    r.rt.run_outbox(now + 30)
    assert any("approved by" in c.body["text"] for c in slack.calls("chat.update", ok_only=True))
    posts = [c.body["text"] for c in slack.calls("chat.postMessage", ok_only=True)]
    assert len(posts) == len(set(posts))  # nothing sent twice across the restart


# ---- the slash command -------------------------------------------------------------------------


def test_slash_command(pending: tuple[Rig, str, Any]) -> None:
    r, action_id, server = pending
    url = server.url + "/slack/commands"

    def run(text: str, user: str = APPROVER) -> str:
        body = slash_body(text, user)
        status, answer = post(url, body, sign(body))
        assert status == 200 and answer["response_type"] == "ephemeral"
        return str(answer["text"])

    assert "1 awaiting approval" in run("status")
    assert action_id[:12] in run("actions")
    assert "paused" in run("pause maintenance window")
    st = r.store.engine_state()
    assert st.paused and st.paused_by.startswith("slack:U0ALICE")
    assert "running" in run("resume")
    assert not r.store.engine_state().paused
    assert "approved" in run(f"approve {action_id[:10]}")
    assert "already approved" in run(f"reject {action_id}")
    assert "usage" in run("dance")
    assert "usage" in run("")  # a bare /gpufleet
    before = journal(r)
    assert "not on gpufleet's approver list" in run("pause", user="U0MALLORY")
    assert journal(r) == before


def test_slash_command_signature_is_checked(pending: tuple[Rig, str, Any]) -> None:
    r, _, server = pending
    before = journal(r)
    body = slash_body("pause")
    assert post(server.url + "/slack/commands", body, sign(body, secret="x"))[0] == 401
    assert post(server.url + "/slack/commands", body, {})[0] == 401
    assert not r.store.engine_state().paused
    assert journal(r) == before


def test_approval_on_the_cli_shows_in_slack(
    pending: tuple[Rig, str, Any], slack: SlackServer
) -> None:
    r, action_id, _ = pending
    now = time.time()
    r.engine.approve(action_id, "bob", now)  # what `gpufleet actions approve` calls
    r.cycle([xid("n1", 0, now)], now)
    r.rt.run_outbox(now)
    prompt = r.rt.astore.prompt(action_id)
    assert prompt is not None and prompt.state == "approved" and prompt.decided_by == "bob"
    assert any(
        "approved by bob" in c.body["text"] for c in slack.calls("chat.update", ok_only=True)
    )
    thread = [
        c.body["text"]
        for c in slack.calls("chat.postMessage", ok_only=True)
        if "thread_ts" in c.body
    ]
    assert any("approved by bob" in t for t in thread)


def test_the_shipped_slack_app_manifest_points_at_routes_the_listener_serves(
    pending: tuple[Rig, str, Any],
) -> None:
    """deploy/slack/app-manifest.yaml is what an operator pastes into Slack: its slash command
    and interactivity URLs must be paths this listener answers, behind the shipped Ingress."""
    root = Path(__file__).resolve().parents[2] / "deploy" / "slack"
    manifest = yaml.safe_load((root / "app-manifest.yaml").read_text())
    ingress = yaml.safe_load((root / "ingress.yaml").read_text())
    (cmd,) = manifest["features"]["slash_commands"]
    assert cmd["command"] == "/gpufleet"
    interactions = urlsplit(manifest["settings"]["interactivity"]["request_url"])
    commands = urlsplit(cmd["url"])
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    assert {"chat:write", "commands", "channels:history", "usergroups:read"} <= scopes
    (rule,) = ingress["spec"]["rules"]
    (route,) = rule["http"]["paths"]
    for url in (interactions, commands):
        assert url.scheme == "https" and url.netloc == rule["host"]
        assert url.path.startswith(route["path"])
    assert route["backend"]["service"] == {"name": "gpufleet-slack", "port": {"name": "slack"}}
    base = yaml.safe_load_all((root.parent / "base" / "service.yaml").read_text())
    (svc,) = [s for s in base if s and s["metadata"]["name"] == "gpufleet-slack"]
    assert "slack" in {p["name"] for p in svc["spec"]["ports"]}  # the Service it routes to

    _r, action_id, server = pending
    body = slash_body("status", APPROVER)
    status, answer = post(server.url + commands.path, body, sign(body))
    assert status == 200 and "1 awaiting approval" in answer["text"]
    click = click_body(action_id, APPROVER, verb="gpufleet_reject")
    assert post(server.url + interactions.path, click, sign(click))[0] == 200


def test_a_late_click_on_a_request_whose_incident_ended_expires_it_and_says_why(
    pending: tuple[Rig, str, Any], slack: SlackServer
) -> None:
    """The journal changed after the prompt was posted (the incident ended, as the leader's
    cycle wrote it): approving re-checks it, expires the action, and the person reads why."""
    from dataclasses import replace

    from remediations.types import IncidentStatus

    r, action_id, server = pending
    a = r.store.get_action(action_id)
    assert a is not None
    inc = r.store.get_incident(a.incident_id)
    assert inc is not None
    ended = time.time()
    r.store.save_incidents([replace(inc, status=IncidentStatus.RESOLVED, resolved_at=ended)])
    body = click_body(action_id)
    assert post(server.url + "/slack/interactions", body, sign(body))[0] == 200
    done = r.store.get_action(action_id)
    assert done is not None and done.state is ActionState.EXPIRED
    assert done.result.startswith(f"expired on approval: its incident {inc.id[:12]}")
    r.rt.run_outbox(time.time())
    told = slack.calls("chat.postEphemeral", ok_only=True)
    assert told and "not approved, expired on approval: its incident" in told[-1].body["text"]
