"""A gateway in front of a real Prometheus that demands what hosted backends demand.

Like a Mimir or VictoriaMetrics cluster gateway, or an oauth/kube-rbac-proxy sidecar: requests
must carry the expected bearer token (or basic auth), the tenant header, and a path prefix that
the gateway strips before forwarding (`/select/0/prometheus/api/v1/query` -> `/api/v1/query`).
Anything else gets the status such a gateway gives (401, 403 or 404) with a Prometheus-style
error body. With `tls=(cert, key, client_ca)` it serves HTTPS and requires a client certificate
signed by `client_ca`.

    with AuthProxy(prom.url, prefix="/select/0/prometheus", token="t1",
                   headers={"X-Scope-OrgID": "team-a"}) as gw:
        gw.token = "t2"          # rotate: the old token is now refused
        gw.seen                  # every (path, status) answered
"""

from __future__ import annotations

import base64
import ssl
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._forward(None)

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        self._forward(self.rfile.read(n))

    def _forward(self, body: bytes | None) -> None:
        gw = self.server.gateway
        status = gw.check(self.path, dict(self.headers.items()))
        if status:
            gw.record(self.path, status)
            msg = b'{"status":"error","errorType":"unauthorized","error":"gateway refused"}'
            self._reply(status, msg)
            return
        path = self.path[len(gw.prefix) :]
        req = urllib.request.Request(gw.upstream + path, data=body, method=self.command)
        if body is not None:
            req.add_header("Content-Type", self.headers.get("Content-Type", ""))
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                status, data = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, data = exc.code, exc.read()
        except OSError as exc:
            status, data = 502, str(exc).encode()
        gw.record(self.path, status)
        self._reply(status, data)

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    gateway: AuthProxy


class AuthProxy:
    def __init__(
        self,
        upstream: str,
        *,
        prefix: str = "",
        token: str | None = None,
        basic: tuple[str, str] | None = None,
        headers: dict[str, str] | None = None,
        tls: tuple[str, str, str] | None = None,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.prefix = prefix.rstrip("/")
        self.token = token
        self.basic = basic
        self.headers = dict(headers or {})
        self.seen: list[tuple[str, int]] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.gateway = self
        scheme = "http"
        if tls is not None:
            cert, key, client_ca = tls
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(cert, key)
            ctx.load_verify_locations(client_ca)
            ctx.verify_mode = ssl.CERT_REQUIRED
            self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self._server.server_address[1]}{self.prefix}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def check(self, path: str, headers: dict[str, str]) -> int:
        """0 when the request may pass, else the status the gateway answers."""
        auth = headers.get("Authorization", "")
        if self.token is not None and auth != f"Bearer {self.token}":
            return 401
        if self.basic is not None:
            want = base64.b64encode(f"{self.basic[0]}:{self.basic[1]}".encode()).decode()
            if auth != f"Basic {want}":
                return 401
        for name, value in self.headers.items():
            if headers.get(name) != value:
                return 403
        if not path.startswith(self.prefix + "/"):
            return 404
        return 0

    def record(self, path: str, status: int) -> None:
        with self._lock:
            self.seen.append((path, status))

    def statuses(self) -> list[int]:
        with self._lock:
            return [s for _, s in self.seen]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> AuthProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
