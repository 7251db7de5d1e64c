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
from collections.abc import Callable
from typing import Any

from alerts.bounded_http import BoundedHttpServer, Handler, Limits, OnRefused, Request, Response

log = logging.getLogger(__name__)
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
TEXT = "text/plain; charset=utf-8"


Readiness = Callable[[], tuple[bool, dict[str, Any]]]


def _handler(readiness: Readiness, metrics: Callable[[], bytes]) -> Handler:
    def handle(req: Request) -> Response:
        if req.path not in ("/healthz", "/readyz", "/metrics"):
            return Response(404, b"not found\n", TEXT)
        if req.method not in ("GET", "HEAD"):
            return Response(405, b"method not allowed\n", TEXT)
        if req.path == "/healthz":
            return Response(200, b"ok\n", TEXT)
        if req.path == "/readyz":
            ready, body = readiness()
            return Response(200 if ready else 503, json.dumps(body).encode() + b"\n")
        return Response(200, metrics(), PROMETHEUS_TEXT)

    return handle


class HealthServer:
    """The probes and metrics on a bounded server (alerts.bounded_http): a flood of slow or
    malformed connections neither exhausts it nor gets a stack trace back."""

    def __init__(
        self,
        host: str,
        port: int,
        readiness: Readiness,
        metrics: Callable[[], bytes],
        limits: Limits | None = None,
        on_refused: OnRefused | None = None,
    ) -> None:
        self._server = BoundedHttpServer(
            _handler(readiness, metrics),
            host,
            port,
            limits or Limits(max_body=0, workers=4),
            name="probes",
            start=False,
            on_refused=on_refused,
        )

    @property
    def url(self) -> str:
        return self._server.url

    def start(self) -> HealthServer:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.close()
