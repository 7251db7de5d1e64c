"""A minimal WebSocket server (RFC 6455, stdlib only) playing Slack's Socket Mode endpoint:
it pushes envelopes to the connected client and records the client's acknowledgements."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import socket
import struct
import threading
import time
from typing import Any

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def _frame(opcode: int, data: bytes) -> bytes:
    head = bytes([0x80 | opcode])
    n = len(data)
    if n < 126:
        head += bytes([n])
    elif n < 65536:
        head += bytes([126]) + struct.pack("!H", n)
    else:
        head += bytes([127]) + struct.pack("!Q", n)
    return head + data


class SocketModeServer:
    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.url = f"ws://127.0.0.1:{self.sock.getsockname()[1]}/link"
        self.acks: list[dict[str, Any]] = []
        self.conn: socket.socket | None = None
        self.ready = threading.Event()
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += conn.recv(4096)
        key = next(
            line.split(":", 1)[1].strip()
            for line in buf.decode().split("\r\n")
            if line.lower().startswith("sec-websocket-key")
        )
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        conn.sendall(
            (
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
            ).encode()
        )
        self.conn = conn
        conn.sendall(_frame(1, json.dumps({"type": "hello", "num_connections": 1}).encode()))
        self.ready.set()
        self._read(conn)

    def _read(self, conn: socket.socket) -> None:
        def exact(n: int) -> bytes:
            out = b""
            while len(out) < n:
                chunk = conn.recv(n - len(out))
                if not chunk:
                    raise ConnectionError
                out += chunk
            return out

        try:
            while not self._stop:
                b0, b1 = exact(2)
                opcode, n = b0 & 0x0F, b1 & 0x7F
                if n == 126:
                    n = struct.unpack("!H", exact(2))[0]
                elif n == 127:
                    n = struct.unpack("!Q", exact(8))[0]
                mask = exact(4) if b1 & 0x80 else b"\0\0\0\0"
                data = bytes(c ^ mask[i % 4] for i, c in enumerate(exact(n)))
                if opcode == 1:
                    self.acks.append(json.loads(data))
                elif opcode == 9:
                    conn.sendall(_frame(10, data))
                elif opcode == 8:
                    return
        except (ConnectionError, OSError):
            return

    def push(self, envelope: dict[str, Any]) -> None:
        assert self.ready.wait(10) and self.conn is not None
        self.conn.sendall(_frame(1, json.dumps(envelope).encode()))

    def wait_ack(self, envelope_id: str, timeout: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for a in self.acks:
                if a.get("envelope_id") == envelope_id:
                    return a
            time.sleep(0.05)
        raise AssertionError(f"no ack for {envelope_id}")

    def close(self) -> None:
        self._stop = True
        if self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.close()
        self.sock.close()
