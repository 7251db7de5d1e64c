"""The inbound HTTP endpoints: Slack interactivity, the slash command, Alertmanager's webhook.

    POST /slack/interactions     signed (v0), form field `payload` = block_actions JSON
    POST /slack/commands         signed (v0), form-encoded slash command
    POST /alertmanager/webhook   Alertmanager webhook v4 (optional bearer token)
    GET  /healthz

A Slack request is refused with 401 before anything is parsed unless its signature over the raw
body verifies, its timestamp is within five minutes, and it was not seen before (replay); a
malformed one gets 400. Neither changes anything.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from alerts.am_intake import BadPayload, Intake
from alerts.interactions import BadRequest, Interactions
from alerts.signature import WINDOW, Refused, verify
from alerts.store import AlertsStore

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
        except (BadRequest, ValueError, KeyError, UnicodeDecodeError) as exc:
            log.warning("slack %s: malformed request: %s", path, exc)
            return 400, {"error": "malformed request"}

    def alertmanager(self, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        if self.bearer:
            auth = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
            if not hmac.compare_digest(auth.encode(), f"Bearer {self.bearer}".encode()):
                return 401, {"error": "missing or wrong bearer token"}
        try:
            n = self.intake.receive(json.loads(body), self.clock())
        except (BadPayload, ValueError) as exc:
            return 400, {"error": str(exc)}
        return 200, {"received": n}


class _Handler(BaseHTTPRequestHandler):
    endpoints: Endpoints
    server_version = "gpufleet-alerts"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http: " + format, *args)

    def _reply(self, status: int, data: Any) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._reply(200, {"ok": True})
        else:
            self._reply(404, {"error": "not found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._reply(413, {"error": "too large"})
            return
        body = self.rfile.read(length)
        headers = {k: v for k, v in self.headers.items()}
        path = self.path.split("?", 1)[0]
        try:
            if path in ("/slack/interactions", "/slack/commands"):
                self._reply(*self.endpoints.slack(path, headers, body))
            elif path == "/alertmanager/webhook":
                self._reply(*self.endpoints.alertmanager(headers, body))
            else:
                self._reply(404, {"error": "not found"})
        except Exception:
            log.exception("alerts endpoint %s failed", path)
            self._reply(500, {"error": "internal error"})


class AlertsServer:
    """The endpoints on host:port (port 0: a free one), served from a daemon thread."""

    def __init__(self, endpoints: Endpoints, host: str, port: int) -> None:
        handler = type("Handler", (_Handler,), {"endpoints": endpoints})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self.host, self.port = str(self.httpd.server_address[0]), int(self.httpd.server_address[1])
        self.url = f"http://{self.host}:{self.port}"
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)
