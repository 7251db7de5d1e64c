"""The shipped deployment starts: `deploy/base` rendered with kustomize, its ConfigMap taken
exactly as rendered (only the Prometheus URL and the kubeconfig changed: no cluster DNS and no
in-cluster credentials here; and each listener moved to 127.0.0.1 on a free port, since servers
in tests never bind beyond loopback nor to fixed ports), the container's command and
environment run as the Deployment
runs them, against the simulator's Kubernetes API and a real Prometheus scraping the
simulator's exporters. `/readyz` must report a leader with a successful cycle, and the injected
XID must get a shadow decision in the journal (the shipped policy is shadow)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.k8s_sim import small_scenario
from remediations.store import Store
from remediations.types import ActionState
from simulator.serve import SimulationHandle, start_simulation
from tests.deploy.test_manifests import render
from tests.live_prometheus import scraping_prometheus, wait_for_series
from tests.prometheus_fixture import PrometheusHandle

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]
SPEED = 20.0
XID_NODE = "h100-0001"


def _of(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == kind)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[SimulationHandle]:
    sc = small_scenario(
        faults=[{"kind": "xid48_dbe", "node": XID_NODE, "gpu": 1, "start": "5m"}]
    ).model_copy(update={"start": float(int(time.time()))})
    h = start_simulation(sc, speed=SPEED, kubeconfig_out=tmp_path / "kubeconfig")
    yield h
    h.stop()


@pytest.fixture
def prom(sim: SimulationHandle, tmp_path: Path) -> Iterator[PrometheusHandle]:
    p = scraping_prometheus(sim, tmp_path)
    yield p
    p.stop()


def _ready(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            body: dict[str, Any] = json.loads(r.read())
            return body
    except (urllib.error.URLError, OSError, ValueError):
        return None


def test_rendered_base_reaches_ready_and_journals_a_shadow_decision(
    sim: SimulationHandle, prom: PrometheusHandle, tmp_path: Path
) -> None:
    objects = render("base")
    deployment = _of(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    # Each volume the Deployment mounts becomes a directory here: the ConfigMap's files as
    # rendered, a Secret's keys with a test value; paths in the config follow their mount.
    mounts: dict[str, Path] = {}
    volumes = {v["name"]: v for v in pod["volumes"]}
    data = _of(objects, "ConfigMap")["data"]
    for m in container["volumeMounts"]:
        vol = volumes[m["name"]]
        if "emptyDir" in vol:
            continue
        d = tmp_path / "mounts" / m["name"]
        d.mkdir(parents=True)
        mounts[m["mountPath"]] = d
        if "configMap" in vol:
            for key, text in data.items():
                (d / key).write_text(text)
        elif "secret" in vol:
            (d / "token").write_text("test-webhook-token\n")
    etc = next(d for p, d in mounts.items() if (d / "config.yaml").exists())
    text = (etc / "config.yaml").read_text()
    for path, d in mounts.items():
        text = text.replace(path, str(d))
    config = yaml.safe_load(text)
    config["service"]["source"]["prometheus"]["url"] = prom.url
    config["kubeconfig"] = str(sim.kubeconfig)
    listeners = [config["service"]["http"]] + [
        s for k, s in config["alerts"].items() if k.endswith("http") and s.get("enabled")
    ]
    assert all(s["host"] == "0.0.0.0" for s in listeners), listeners  # as a pod must bind
    for s in listeners:
        s.update(host="127.0.0.1", port=_free_port())
    ports = [s["port"] for s in listeners]
    (etc / "config.yaml").write_text(yaml.safe_dump(config))

    args = list(container["args"])
    for path, d in mounts.items():
        args = [a.replace(path, str(d)) for a in args]
    journal = tmp_path / "journal.db"
    env = {**os.environ, "POD_NAME": "gpufleet-0", "POD_NAMESPACE": "gpufleet",
           "DATABASE_URL": f"sqlite:///{journal}"}  # fmt: skip
    env_names = {e["name"] for e in container["env"]}
    assert {"POD_NAME", "POD_NAMESPACE", "DATABASE_URL"} <= env_names
    wait_for_series(prom, "DCGM_FI_DEV_FB_USED")
    gpufleet = str(Path(sys.executable).with_name("gpufleet"))
    log = tmp_path / "gpufleet.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([gpufleet, *args], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        readyz = f"http://127.0.0.1:{ports[0]}/readyz"
        deadline = time.monotonic() + 120
        body = None
        while time.monotonic() < deadline and proc.poll() is None:
            body = _ready(readyz)
            if body and body["ready"] and body["last_successful_cycle_age_seconds"] is not None:
                break
            time.sleep(0.5)
        assert proc.poll() is None, log.read_text()[-3000:]
        assert body is not None and body["role"] == "leader", (body, log.read_text()[-3000:])
        assert body["ready"] and body["last_successful_cycle_age_seconds"] is not None

        store = Store.open(f"sqlite:///{journal}", cluster=config["cluster"])
        try:
            shadow: list[str] = []
            while time.monotonic() < deadline and not shadow:
                shadow = [
                    f"{a.playbook} {a.target}"
                    for a in store.actions([ActionState.SHADOW])
                    if a.rule == "quarantine-critical-hardware"
                ]
                time.sleep(1.0)
            assert shadow == [f"quarantine node/{XID_NODE}"], log.read_text()[-3000:]
        finally:
            store.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert rc == 0, log.read_text()[-3000:]
