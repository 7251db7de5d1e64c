"""/healthz, /readyz and /metrics on one port (stdlib HTTP server, one thread per request).

/healthz: 200 while the process serves. /readyz: JSON with the role (leader or standby) and the
age of the last successful cycle; 503 when this instance leads but its last good cycle is older
than `stale_after` (it is leading and not working); once a cycle has collected, also
`detector_coverage` (per detector: full, reduced or cannot_run) and `fields_missing`.
/metrics: the Prometheus exposition of the service's own OpenTelemetry metrics.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http %s", format % args)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._send(200, b"ok\n", "text/plain; charset=utf-8")
        elif path == "/readyz":
            ready, body = self.server.readiness()
            self._send(200 if ready else 503, json.dumps(body).encode() + b"\n", "application/json")
        elif path == "/metrics":
            self._send(200, self.server.metrics(), PROMETHEUS_TEXT)
        else:
            self._send(404, b"not found\n", "text/plain; charset=utf-8")

    def _send(self, code: int, data: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        addr: tuple[str, int],
        readiness: Callable[[], tuple[bool, dict[str, Any]]],
        metrics: Callable[[], bytes],
    ) -> None:
        super().__init__(addr, _Handler)
        self.readiness = readiness
        self.metrics = metrics


class HealthServer:
    def __init__(
        self,
        host: str,
        port: int,
        readiness: Callable[[], tuple[bool, dict[str, Any]]],
        metrics: Callable[[], bytes],
    ) -> None:
        self._server = _Server((host, port), readiness, metrics)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> HealthServer:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            daemon=True,
            name="gpufleet-http",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()
