"""The one HTTP server of every inbound listener (Slack, Alertmanager webhook, probes), bounded.

Anyone who can connect must not be able to knock it over, so it never trusts the client:
- the request line and headers must arrive whole within `read_timeout` (a slow client is cut
  off with 408), and fit `max_header_bytes` and `max_headers` (431);
- `Content-Length` must be a plain non-negative integer (400; chunked bodies get 411), and a
  body over `max_body` is refused with 413 before a byte of it is read;
- at most `max_connections` are open at once (one more gets 503 at once, without being read);
- connections are asyncio streams, not threads, so hundreds of idle or half-sent connections
  cost a socket each and the probes still answer; the handler runs in a small thread pool;
- one request per connection (`Connection: close`); a handler that fails answers 500 with a
  generic message, never a stack trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import socket
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus

log = logging.getLogger(__name__)
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET = re.compile(r"/[\x21-\x7e]*")
_LENGTH = re.compile(r"[0-9]{1,18}")


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    """The target without its query string."""
    query: str
    headers: Mapping[str, str]
    """Header names in lower case; a repeated header's values joined with ", "."""
    body: bytes


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"

    @staticmethod
    def json(status: int, data: object) -> Response:
        return Response(status, json.dumps(data).encode() + b"\n")


def error(status: int, message: str) -> Response:
    return Response.json(status, {"error": message})


Handler = Callable[[Request], Response]
OnRefused = Callable[[str, int], None]
"""Told (listener name, status) of every answer of 400 or more: malformed input is counted."""


@dataclass(frozen=True, slots=True)
class Limits:
    max_body: int = 1 << 20
    max_header_bytes: int = 16 << 10
    max_headers: int = 64
    read_timeout: float = 10.0
    """Seconds for the whole request (line, headers, body) to arrive."""
    write_timeout: float = 10.0
    max_connections: int = 512
    workers: int = 8
    """Threads that run the handler (database writes, the engine's approvals)."""


class _Malformed(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.response = error(status, message)


def _parse_head(head: bytes, limits: Limits) -> tuple[str, str, dict[str, str]]:
    lines = head[:-4].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.0", "HTTP/1.1"):
        raise _Malformed(400, "malformed request line")
    method, target, _ = parts
    if not _TOKEN.fullmatch(method) or not _TARGET.fullmatch(target):
        raise _Malformed(400, "malformed request line")
    if len(lines) - 1 > limits.max_headers:
        raise _Malformed(431, f"more than {limits.max_headers} header fields")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not _TOKEN.fullmatch(name):
            raise _Malformed(400, "malformed header field")
        key, value = name.lower(), value.strip(" \t")
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return method, target, headers


async def _read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, limits: Limits
) -> Request:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise _Malformed(431, f"request head over {limits.max_header_bytes} bytes") from None
    method, target, headers = _parse_head(head, limits)
    if "transfer-encoding" in headers:
        raise _Malformed(411, "send the body with a Content-Length (no chunked bodies)")
    raw = headers.get("content-length", "0")
    if not _LENGTH.fullmatch(raw):
        raise _Malformed(400, "Content-Length: expected one non-negative integer")
    length = int(raw)
    if length > limits.max_body:
        raise _Malformed(413, f"body over {limits.max_body} bytes")
    if length and headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # curl waits for it before the body
    body = await reader.readexactly(length) if length else b""
    path, _, query = target.partition("?")
    return Request(method, path, query, headers, body)


def _encode(resp: Response, head_only: bool = False) -> bytes:
    try:
        reason = HTTPStatus(resp.status).phrase
    except ValueError:
        reason = "Unknown"
    head = (
        f"HTTP/1.1 {resp.status} {reason}\r\nContent-Type: {resp.content_type}\r\n"
        f"Content-Length: {len(resp.body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + (b"" if head_only else resp.body)


@dataclass
class _State:
    active: int = 0
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class BoundedHttpServer:
    """`handler` on host:port (port 0: a free one), served from its own thread until close()."""

    def __init__(
        self,
        handler: Handler,
        host: str,
        port: int,
        limits: Limits = Limits(),
        name: str = "http",
        *,
        start: bool = True,
        on_refused: OnRefused | None = None,
    ) -> None:
        """Binds now (a taken port fails here); serves from `start()` (at once by default)."""
        self.handler = handler
        self.limits = limits
        self.name = name
        self.on_refused = on_refused
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.create_server((host, port), family=family, backlog=1024)
        self.host = host
        self.port = int(self._sock.getsockname()[1])
        self.url = f"http://{host if family == socket.AF_INET else f'[{host}]'}:{self.port}"
        self._pool = ThreadPoolExecutor(limits.workers, thread_name_prefix=f"{name}-handler")
        self._loop = asyncio.new_event_loop()
        self._state = _State()
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        if start:
            self.start()

    def start(self) -> BoundedHttpServer:
        if self._thread is None:
            started = threading.Event()
            self._thread = threading.Thread(
                target=self._run, args=(started,), name=f"{self.name}-server", daemon=True
            )
            self._thread.start()
            started.wait(10)
        return self

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._accept, sock=self._sock, limit=self.limits.max_header_bytes)
        )
        started.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        st = self._state
        if st.active >= self.limits.max_connections:
            await self._send(writer, error(503, "too many connections; try again"))
            return
        st.active += 1
        task = asyncio.current_task()
        if task is not None:
            st.tasks.add(task)
        try:
            await self._serve(reader, writer)
        except asyncio.CancelledError:
            writer.transport.abort()  # closing down
            raise
        except Exception:
            log.exception("%s: serving a connection failed", self.name)
            await self._send(writer, error(500, "internal error"))
        finally:
            st.active -= 1
            if task is not None:
                st.tasks.discard(task)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            req = await asyncio.wait_for(
                _read_request(reader, writer, self.limits), self.limits.read_timeout
            )
        except _Malformed as exc:
            await self._send(writer, exc.response)
            return
        except TimeoutError:
            await self._send(writer, error(408, "request not received in time"))
            return
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.transport.abort()  # the client left mid-request: nobody to answer
            return
        loop = asyncio.get_running_loop()
        resp = await loop.run_in_executor(self._pool, self._handle, req)
        await self._send(writer, resp, head_only=req.method == "HEAD")

    def _handle(self, req: Request) -> Response:
        try:
            return self.handler(req)
        except Exception:
            log.exception("%s: %s %s failed", self.name, req.method, req.path)
            return error(500, "internal error")

    async def _send(
        self, writer: asyncio.StreamWriter, resp: Response, head_only: bool = False
    ) -> None:
        if resp.status >= 400:
            log.debug("%s: answered %d", self.name, resp.status)
            if self.on_refused is not None:
                try:
                    self.on_refused(self.name, resp.status)
                except Exception:
                    log.exception("%s: counting a refused request failed", self.name)
        try:
            writer.write(_encode(resp, head_only))
            await asyncio.wait_for(writer.drain(), self.limits.write_timeout)
            writer.close()
            await asyncio.wait_for(writer.wait_closed(), self.limits.write_timeout)
        except (TimeoutError, ConnectionError, OSError):
            writer.transport.abort()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._state.tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*self._state.tasks, return_exceptions=True), 5)

    def close(self) -> None:
        if self._thread is not None and self._loop.is_running():
            fut = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
            with contextlib.suppress(Exception):
                fut.result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        elif self._thread is None and not self._loop.is_closed():
            self._loop.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        with contextlib.suppress(OSError):
            self._sock.close()
