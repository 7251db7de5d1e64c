"""A small threaded HTTP proxy for tests: forwards GETs to an upstream, slow or failing on demand.

    with FaultyProxy(prom.url) as proxy:
        proxy.rule(r"kube", delay=2.0)              # requests whose URL matches: 2 s late
        proxy.rule(r"increase", status=503)         # ... or answered 503 by the proxy
        proxy.rule(r"identity", mutate=fn)          # ... or with the upstream body rewritten
        collector = PrometheusCollector(PromSettings(proxy.url, ...))

Binds 127.0.0.1 on a free port; `hits` counts matching requests per rule.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Rule:
    pattern: re.Pattern[str]
    delay: float = 0.0
    status: int = 0
    mutate: Callable[[bytes], bytes] | None = None
    hits: int = 0


class _Handler(BaseHTTPRequestHandler):
    server: FaultyProxy

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        url = urllib.parse.unquote_plus(self.path)
        rule = self.server.match(url)
        if rule is not None and rule.delay:
            time.sleep(rule.delay)
        if rule is not None and rule.status:
            self._reply(
                rule.status, b'{"status":"error","errorType":"unavailable","error":"proxy"}'
            )
            return
        try:
            with urllib.request.urlopen(self.server.upstream + self.path, timeout=30) as resp:
                status, body = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, body = exc.code, exc.read()
        except OSError as exc:  # upstream gone (test teardown): a gateway error, quietly
            status, body = 502, str(exc).encode()
        if rule is not None and rule.mutate is not None:
            body = rule.mutate(body)
        self._reply(status, body)

    def _reply(self, status: int, body: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass


class FaultyProxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = upstream.rstrip("/")
        self.rules: list[Rule] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.1})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def rule(
        self,
        pattern: str,
        *,
        delay: float = 0.0,
        status: int = 0,
        mutate: Callable[[bytes], bytes] | None = None,
    ) -> Rule:
        r = Rule(re.compile(pattern), delay, status, mutate)
        with self._lock:
            self.rules.append(r)
        return r

    def match(self, url: str) -> Rule | None:
        with self._lock:
            for r in self.rules:
                if r.pattern.search(url):
                    r.hits += 1
                    return r
        return None

    def __enter__(self) -> FaultyProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)
