"""Socket Mode: slack-sdk's SocketModeClient opens the link through `apps.connections.open` on
the local Slack server and a local WebSocket; button clicks and slash commands pushed over it
are handled (allowlist and all) and each envelope is acknowledged."""

from __future__ import annotations

import time

from harness.slack_server import SlackServer
from remediations.types import ActionState
from tests.alerts.conftest import APPROVER, Rig, xid
from tests.alerts.socket_server import SocketModeServer


def test_socket_mode_click_and_slash_command(rig, slack: SlackServer) -> None:
    ws = SocketModeServer()
    slack.state.socket_url = ws.url
    r: Rig = rig(app_token="xapp-test")
    now = time.time()
    r.cycle([xid("n1", 0, now)], now)
    r.rt.run_outbox(now)
    (action,) = r.store.actions([ActionState.AWAITING_APPROVAL])
    link = r.rt.socket_mode()
    try:
        ws.push(
            {
                "envelope_id": "e-unauthorised",
                "type": "interactive",
                "accepts_response_payload": False,
                "payload": {
                    "type": "block_actions",
                    "user": {"id": "U0MALLORY"},
                    "channel": {"id": "C0FLEET"},
                    "actions": [{"action_id": "gpufleet_approve", "value": action.id}],
                },
            }
        )
        ws.wait_ack("e-unauthorised")
        assert r.store.get_action(action.id).state is ActionState.AWAITING_APPROVAL  # type: ignore[union-attr]
        ws.push(
            {
                "envelope_id": "e-click",
                "type": "interactive",
                "accepts_response_payload": False,
                "payload": {
                    "type": "block_actions",
                    "user": {"id": APPROVER, "username": "alice"},
                    "channel": {"id": "C0FLEET"},
                    "actions": [{"action_id": "gpufleet_approve", "value": action.id}],
                },
            }
        )
        ws.wait_ack("e-click")
        a = r.store.get_action(action.id)
        assert a is not None and a.state is ActionState.APPROVED
        assert a.approved_by == f"slack:{APPROVER} (alice)"
        ws.push(
            {
                "envelope_id": "e-status",
                "type": "slash_commands",
                "accepts_response_payload": True,
                "payload": {"command": "/gpufleet", "text": "status", "user_id": APPROVER},
            }
        )
        ack = ws.wait_ack("e-status")
        assert "automation running" in ack["payload"]["text"]
    finally:
        link.close()
        ws.close()
