"""The inbound HTTP endpoints: Slack interactivity, the slash command, Alertmanager's webhook.

    POST /slack/interactions     signed (v0), form field `payload` = block_actions JSON
    POST /slack/commands         signed (v0), form-encoded slash command
    POST /alertmanager/webhook   Alertmanager webhook v4 (bearer token; its own listener)
    GET  /healthz

The Slack endpoints (reached from the internet) and the webhook (in-cluster only) are served on
separate listeners, so each can be exposed on its own.

A Slack request is refused with 401 before anything is parsed unless its signature over the raw
body verifies, its timestamp is within five minutes, and it was not seen before (replay); a
malformed one gets 400. Neither changes anything. The server itself (body cap, timeouts,
connection bound, header limits) is `alerts.bounded_http`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from alerts.alerts_store import AlertsStore
from alerts.am_intake import BadPayload, Intake, TooManyAlerts
from alerts.bounded_http import (
    BoundedHttpServer,
    Handler,
    Limits,
    OnRefused,
    Request,
    Response,
    error,
)
from alerts.interactions import BadRequest, Interactions
from alerts.signature import WINDOW, Refused, verify

log = logging.getLogger(__name__)
MAX_BODY = 1 << 20


class Endpoints:
    """What the handler calls; kept apart from http.server so tests can read it plainly."""

    def __init__(
        self,
        interactions: Interactions,
        intake: Intake,
        astore: AlertsStore,
        signing_secret: str | None,
        bearer: str | None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.interactions = interactions
        self.intake = intake
        self.astore = astore
        self.secret = signing_secret
        self.bearer = bearer
        self.clock = clock

    def slack(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        now = self.clock()
        try:
            sig = verify(self.secret, headers, body, now)
        except Refused as exc:
            log.warning("slack %s refused: %s", path, exc)
            return 401, {"error": str(exc)}
        digest = hashlib.sha256(sig.encode()).hexdigest()
        if not self.astore.first_seen(digest, now, WINDOW):
            log.warning("slack %s refused: replayed request", path)
            return 401, {"error": "replayed request"}
        try:
            form = {
                k: v[0]
                for k, v in parse_qs(
                    body.decode(), keep_blank_values=True, strict_parsing=True
                ).items()
            }
            if path == "/slack/commands":
                return 200, self.interactions.on_slash(form, now)
            payload = json.loads(form["payload"])
            if not isinstance(payload, dict):
                raise BadRequest("payload is not an object")
            return 200, self.interactions.on_block_action(payload, now)
        except (BadRequest, ValueError, KeyError, RecursionError) as exc:
            log.warning("slack %s: malformed request: %s", path, type(exc).__name__)
            return 400, {"error": "malformed request"}

    def alertmanager(self, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        if self.bearer:
            auth = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
            if not hmac.compare_digest(auth.encode(), f"Bearer {self.bearer}".encode()):
                return 401, {"error": "missing or wrong bearer token"}
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):
            return 400, {"error": "expected a JSON body"}
        try:
            got = self.intake.receive(payload, self.clock())
        except TooManyAlerts as exc:
            return 413, {"error": str(exc)}
        except BadPayload as exc:
            return 400, {"error": str(exc)}
        if got.refused:
            return 429, {"received": got.kept, "refused": got.refused, "error": "intake full"}
        return 200, {"received": got.kept}


SLACK_PATHS = frozenset({"/slack/interactions", "/slack/commands"})
WEBHOOK_PATHS = frozenset({"/alertmanager/webhook"})


def _handler(endpoints: Endpoints, paths: frozenset[str]) -> Handler:
    def handle(req: Request) -> Response:
        if req.path == "/healthz":
            if req.method != "GET":
                return error(405, "method not allowed")
            return Response.json(200, {"ok": True})
        if req.path in paths:
            if req.method != "POST":
                return error(405, "method not allowed")
            if req.path == "/alertmanager/webhook":
                return Response.json(*endpoints.alertmanager(dict(req.headers), req.body))
            return Response.json(*endpoints.slack(req.path, dict(req.headers), req.body))
        return error(404, "not found")

    return handle


class AlertsServer:
    """One listener (`paths`: the Slack endpoints, or the webhook) on host:port (port 0: a free
    one), served by alerts.bounded_http; other paths get 404 there."""

    def __init__(
        self,
        endpoints: Endpoints,
        host: str,
        port: int,
        limits: Limits | None = None,
        paths: frozenset[str] = SLACK_PATHS | WEBHOOK_PATHS,
        name: str = "alerts",
        on_refused: OnRefused | None = None,
    ) -> None:
        self.server = BoundedHttpServer(
            _handler(endpoints, paths),
            host,
            port,
            limits or Limits(max_body=MAX_BODY),
            name=name,
            on_refused=on_refused,
        )
        self.host, self.port, self.url = self.server.host, self.server.port, self.server.url

    def close(self) -> None:
        self.server.close()
