"""The real Alertmanager (Debian `prometheus-alertmanager`) on free loopback ports, configured
to post to a given webhook URL; stopped at the end of the test."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BINARY = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
TOKEN = "am-webhook-token"

CONFIG = """
route:
  receiver: gpufleet
  group_by: [alertname, node]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
  routes:
    - matchers: ['alertname=~"Gpufleet.*"']
      receiver: oncall
      group_by: [node]
receivers:
  - name: gpufleet
    webhook_configs:
      - url: {webhook}
        send_resolved: true
        http_config:
          authorization: {{credentials: {token}}}
  - name: oncall
"""


def available() -> bool:
    return Path(BINARY).exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Alertmanager:
    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=5) as resp:
            return json.loads(resp.read())

    def post_alerts(self, alerts: list[dict[str, Any]]) -> None:
        req = urllib.request.Request(
            self.url + "/api/v2/alerts",
            data=json.dumps(alerts).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.status == 200


@contextmanager
def alertmanager(tmp: Path, webhook: str) -> Iterator[Alertmanager]:
    cfg = tmp / "alertmanager.yml"
    cfg.write_text(CONFIG.format(webhook=webhook, token=TOKEN))
    port = free_port()
    proc = subprocess.Popen(
        [
            BINARY,
            f"--config.file={cfg}",
            f"--storage.path={tmp / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "alertmanager.log", "wb"),  # noqa: SIM115
    )
    am = Alertmanager(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(am.url + "/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((tmp / "alertmanager.log").read_text())
            time.sleep(0.1)
        yield am
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
