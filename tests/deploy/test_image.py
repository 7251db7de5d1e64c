"""The image is built for real (`make image`: buildah over a Debian base made by mmdebstrap, no
Docker daemon, no registry) and its entrypoint runs: `gpufleet --version`, and the service's
`/healthz` answering from inside the image (`gpufleet run --embedded`, which needs no cluster),
as the non-root user, with nothing written under the image's own directories.

The first build downloads Debian packages and PyPI wheels (minutes, docs/performance.md); later
ones reuse the cached base tarball and buildah's layers."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest

from tests.deploy.pins import differences, pins
from tests.deploy.rbac_calls import ROOT

pytestmark = pytest.mark.slow
IMAGE = "localhost/gpufleet:test"
ENV = {**os.environ, "STORAGE_DRIVER": "vfs", "BUILDAH_ISOLATION": "chroot"}


def _buildah(*args: str, timeout: float = 120) -> str:
    done = subprocess.run(["buildah", *args], capture_output=True, text=True, timeout=timeout,
                          env=ENV, check=False)  # fmt: skip
    assert done.returncode == 0, f"buildah {' '.join(args)}:\n{done.stderr[-3000:]}"
    return done.stdout.strip()


@pytest.fixture(scope="module")
def container() -> Iterator[str]:
    if shutil.which("buildah") is None or shutil.which("mmdebstrap") is None:
        pytest.skip("buildah/mmdebstrap missing: `make test` installs them (Debian packages)")
    built = subprocess.run(["make", "-s", "image", f"IMAGE={IMAGE}"], cwd=ROOT, env=ENV,
                           capture_output=True, text=True, timeout=3600, check=False)  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    ctr = _buildah("from", "--pull-never", IMAGE)
    yield ctr
    _buildah("rm", ctr)


def _run(ctr: str, *cmd: str) -> subprocess.CompletedProcess[str]:
    argv = ["buildah", "run", "--isolation", "chroot", ctr, "--", *cmd]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=ENV, check=False)


def test_version_as_the_non_root_user(container: str) -> None:
    version = _run(container, "gpufleet", "--version")
    assert version.returncode == 0 and re.match(r"gpufleet \d", version.stdout), version
    assert _run(container, "id", "-u").stdout.strip() == "10001"
    wrote = _run(container, "python3", "-c", "open('/opt/gpufleet/probe', 'w')")
    assert wrote.returncode != 0 and "Permission denied" in wrote.stderr


DISTRIBUTIONS = "import importlib.metadata as m, json; \
print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
"""Every distribution the image's venv has (its dist-info under /opt/gpufleet), name -> version."""


def test_the_image_ships_the_pinned_versions(container: str) -> None:
    listed = _run(container, "/opt/gpufleet/bin/python3", "-c", DISTRIBUTIONS)
    assert listed.returncode == 0, listed.stderr[-3000:]
    shipped: dict[str, str] = json.loads(listed.stdout)
    assert "scikit-learn" in shipped and "gpufleet" in shipped
    assert differences(shipped, pins()) == []


def test_the_entrypoint_serves_healthz(container: str) -> None:
    cmd = ["buildah", "run", "--isolation", "chroot", container, "--", "gpufleet", "run",
           "--embedded", "--dashboard-port", "-1", "--metrics-port", "0", "--k8s-port", "0",
           "--workdir", "/tmp/gf", "--kubeconfig-out", "/tmp/gf/kubeconfig"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=ENV, start_new_session=True)  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        url = None
        deadline = time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            m = re.match(r"service\s+(http://127\.0\.0\.1:\d+)", line)
            url = m.group(1) if m else None
        assert url is not None, "".join(lines)[-3000:]
        with urllib.request.urlopen(f"{url}/healthz", timeout=10) as r:
            assert r.status == 200 and r.read().strip() == b"ok"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
