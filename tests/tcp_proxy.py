"""A TCP proxy for tests that must cut a dependency they do not own (the shared PostgreSQL):
clients connect to the proxy; `cut()` resets every open connection and refuses new ones, as
a database that went away does; `restore()` lets connections through again.

    with TcpProxy("127.0.0.1", 5432) as proxy:
        url = f"postgresql+psycopg://postgres@127.0.0.1:{proxy.port}/test"
        ...
        proxy.cut()

Binds 127.0.0.1 on a free port; one thread per direction of each connection.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading


class TcpProxy:
    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._down = False
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)
        self._thread.start()

    def cut(self) -> None:
        """Reset every connection now and every new one until `restore()`."""
        with self._lock:
            self._down = True
            conns, self._open = list(self._open), set()
        for c in conns:
            _reset(c)

    def restore(self) -> None:
        with self._lock:
            self._down = False

    def stop(self) -> None:
        self._stopped.set()
        self.cut()
        self._server.close()
        self._thread.join(5)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                down = self._down
            if down:
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _reset(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                cut_meanwhile = self._down
                if not cut_meanwhile:
                    self._open |= {client, upstream}
            if cut_meanwhile:  # cut() ran while we dialled: this connection is cut too
                _reset(client)
                _reset(upstream)
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with self._lock:
                    self._open.discard(s)
                _reset(s)


def _reset(s: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), as a crashed server's host does. `shutdown` first: on Linux
    `close` alone does not wake the pump thread blocked in `recv` on the same socket, so the
    connection (and the database session behind it, with its locks) would stay open."""
    with contextlib.suppress(OSError):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
