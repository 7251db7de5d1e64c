"""A throwaway CA, a server certificate for 127.0.0.1 and a client certificate, made with the
`openssl` command (Debian package openssl), for tests of TLS and mutual TLS."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)


def make_certs(d: Path) -> Certs:
    if shutil.which("openssl") is None:
        pytest.skip("no openssl: `make test` installs the Debian package openssl")
    d.mkdir(parents=True, exist_ok=True)
    ca_key, ca = d / "ca.key", d / "ca.pem"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=test-ca")  # fmt: skip
    out = {}
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "")):
        key, csr, cert = d / f"{name}.key", d / f"{name}.csr", d / f"{name}.pem"
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", key, "-out", csr, "-subj", f"/CN={name}")  # fmt: skip
        extfile = d / f"{name}.ext"
        extfile.write_text(
            (ext + "\n" if ext else "")
            + f"extendedKeyUsage={'serverAuth' if name == 'server' else 'clientAuth'}\n"
        )
        _openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
                 "-out", cert, "-days", "2", "-extfile", extfile)  # fmt: skip
        out[name] = (cert, key)
    return Certs(ca, *out["server"], *out["client"])
