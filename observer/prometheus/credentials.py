"""How gpufleet proves who it is to Prometheus, and secrets read from files that rotate.

In a pod the bearer token is the projected ServiceAccount token, which the kubelet rewrites
before it expires (an atomic symlink swap under the mounted directory). client-go re-reads such a
file rather than caching it for the process's life; `FileSecret` does the same: it stats the file
on each use and reads it again when its identity, size or modification time changed. Nothing
here speaks HTTP (observer.prometheus.client applies `PromAuth` to its one session).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class PromAuth:
    """Credentials and TLS material for one Prometheus-compatible server. Secret values never
    appear in a repr (settings are logged)."""

    bearer_token_file: str = ""
    """A file holding the bearer token (the pod's ServiceAccount token), re-read on rotation."""
    username: str = ""
    """Basic auth user; the password comes from `password` (the environment) or `password_file`."""
    password: str = field(default="", repr=False)
    password_file: str = ""
    ca_file: str = ""
    """PEM bundle of the CAs that sign the server's certificate (default: the system's)."""
    cert_file: str = ""
    """Client certificate (PEM) for mutual TLS; its key in `key_file` (or the same file)."""
    key_file: str = ""
    insecure_skip_verify: bool = False
    """Do not verify the server's certificate (tests and emergencies only)."""


class SecretUnreadable(OSError):
    """A credentials file could not be read (the message names the file)."""


class FileSecret:
    """The stripped contents of a file, re-read whenever the file changes. Thread-safe."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.reads = 0
        """How many times the file was actually read (tests check rotation with it)."""
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int, int] | None = None
        self._value = ""

    def value(self) -> str:
        try:
            st = os.stat(self.path)  # follows the kubelet's `..data` symlink
            stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            with self._lock:
                if stamp != self._stamp:
                    with open(self.path, encoding="utf-8") as f:
                        self._value = f.read().strip()
                    self._stamp = stamp
                    self.reads += 1
                value = self._value
        except OSError as exc:
            raise SecretUnreadable(f"cannot read {self.path}: {exc.strerror or exc}") from None
        if not value:
            raise SecretUnreadable(f"{self.path} is empty")
        return value


__all__ = ["FileSecret", "PromAuth", "SecretUnreadable"]
