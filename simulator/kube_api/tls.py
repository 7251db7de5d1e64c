"""HTTPS beside HTTP on the simulated API server's one port, with a self-signed certificate.

kubectl (client-go's clientcmd) sends a kubeconfig's credentials only over TLS: against a plain
`http://` server every kubectl request is anonymous, so RBAC could never tell kubectl's users
apart. The server therefore answers TLS on the same port (a connection whose first byte is a TLS
handshake record is wrapped), and kubeconfigs point at `https://` with the certificate as their
CA; plain HTTP keeps working for the simulator's control endpoints and raw probes. The
certificate (for 127.0.0.1 and localhost) is made once per process with the `openssl` CLI.
"""

from __future__ import annotations

import functools
import socket
import ssl
import subprocess
import tempfile
from pathlib import Path

TLS_HANDSHAKE = 0x16


@functools.cache
def certificate() -> tuple[Path, Path]:
    """(certificate, key) PEM files of a self-signed certificate for 127.0.0.1 and localhost."""
    d = Path(tempfile.mkdtemp(prefix="gpufleet-sim-tls-"))
    cert, key = d / "tls.crt", d / "tls.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "3650", "-subj", "/CN=gpufleet-sim",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


@functools.cache
def server_context() -> ssl.SSLContext:
    cert, key = certificate()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def ca_pem() -> str:
    return certificate()[0].read_text()


def maybe_wrap(sock: socket.socket, timeout: float = 10.0) -> socket.socket:
    """`sock` wrapped in TLS when the client opens with a TLS handshake, else `sock` itself."""
    sock.settimeout(timeout)
    try:
        first = sock.recv(1, socket.MSG_PEEK)
    except OSError:
        return sock
    finally:
        sock.settimeout(None)
    if first and first[0] == TLS_HANDSHAKE:
        return server_context().wrap_socket(sock, server_side=True)
    return sock
