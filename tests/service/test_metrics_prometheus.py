"""Self-telemetry: the real Debian Prometheus scrapes `gpufleet run`'s /metrics and finds the
cycle, findings, incidents, leader and scheduled-job series; /healthz and /readyz answer."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from gpufleet.config import GpufleetConfig
from gpufleet.service.assembly import build
from gpufleet.service.runtime import Service
from gpufleet.service.service_config import ServiceConfig
from harness.k8s_sim import small_scenario
from observer.scrape.collector import ScrapeSettings
from remediations.store import Store
from simulator.serve import SimulationHandle, start_simulation
from tests.service.procs import wait_for
from tests.service.test_diagnose_sim import service_policy

pytestmark = pytest.mark.prometheus


@pytest.fixture
def handle(tmp_path: Path) -> Iterator[SimulationHandle]:
    sc = small_scenario(
        faults=[{"kind": "xid48_dbe", "node": "h100-0001", "gpu": 1, "start": "30s"}]
    ).model_copy(update={"start": float(int(time.time()))})
    h = start_simulation(sc, speed=20.0, kubeconfig_out=tmp_path / "kubeconfig")
    yield h
    h.stop()


@pytest.fixture
def service(handle: SimulationHandle, tmp_path: Path) -> Iterator[Service]:
    cfg = GpufleetConfig.model_validate(
        {
            "cluster": "small",
            "store_url": f"sqlite:///{tmp_path / 'j.db'}",
            "service": ServiceConfig.model_validate(
                {
                    "interval": 0.5,
                    "source": {"discovery_url": f"{handle.metrics_url}/targets"},
                    "http": {"port": 0},
                    "schedule": [
                        {
                            "name": "every-minute",
                            "kind": "maintenance_window",
                            "cron": "* * * * *",
                            "params": {"window": "30s"},
                        }
                    ],
                }
            ),
        }
    )
    store = Store.open(cfg.store_url, cluster="small")
    parts, _ = build(
        cfg,
        service_policy(),
        "metrics-test",
        store=store,
        kubeconfig=str(handle.kubeconfig),
        scrape=_scrape(handle),
        clock=time.time,
        interval=0.5,
    )
    svc = Service(parts).start()
    yield svc
    assert svc.shutdown() == 0


def _scrape(handle: SimulationHandle) -> ScrapeSettings:
    return ScrapeSettings(discovery_url=f"{handle.metrics_url}/targets", cluster="small")


def _prometheus(tmp_path: Path, target: str) -> Generator[str, None, None]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus not on PATH: `make test` installs the Debian package")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: gpufleet\n    static_configs: [{{targets: ['{target}']}}]\n"
    )
    log = (tmp_path / "prometheus.log").open("w")
    p = subprocess.Popen(
        [binary, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        p.terminate()
        p.wait(timeout=20)
        log.close()


def _query(prom: str, q: str) -> list[dict[str, object]]:
    url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return list(json.loads(r.read())["data"]["result"])
    except OSError:
        return []


def test_prometheus_scrapes_self_telemetry(service: Service, tmp_path: Path) -> None:
    target = service.http.url.removeprefix("http://")
    with urllib.request.urlopen(service.http.url + "/healthz", timeout=5) as r:
        assert r.status == 200
    with urllib.request.urlopen(service.http.url + "/readyz", timeout=5) as r:
        body = json.loads(r.read())
    assert body["role"] == "leader" and body["identity"] == "metrics-test"
    gen = _prometheus(tmp_path, target)
    prom = next(gen)
    try:
        wait_for(
            lambda: bool(_query(prom, "gpufleet_cycles_total > 2")), 60, "cycles in Prometheus", 1.0
        )
        wait_for(
            lambda: bool(_query(prom, 'gpufleet_findings_total{kind="gpu_xid"}')),
            60,
            "findings by kind in Prometheus",
            1.0,
        )
        for q in (
            "gpufleet_leader == 1",
            "gpufleet_cycle_duration_seconds_count > 0",
            "gpufleet_incidents_open",
            "gpufleet_breaker_open == 0",
            "gpufleet_last_successful_cycle_timestamp_seconds > 0",
        ):
            assert _query(prom, q), q
        with urllib.request.urlopen(service.http.url + "/readyz", timeout=5) as r:
            age = json.loads(r.read())["last_successful_cycle_age_seconds"]
        assert age is not None and age < 10
    finally:
        gen.close()
