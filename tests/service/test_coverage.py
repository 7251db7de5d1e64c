"""Field coverage in the service (issue 11): a fleet whose exporters serve dcgm-exporter's
shipped counters file without the XID field. At start the coverage report is logged; the
detector that cannot run (gpu_xid) says so in every cycle's findings; /metrics carries
`gpufleet_detector_coverage{detector, state}` and /readyz the states and missing fields."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from detectors.findings import FindingKind, Severity
from gpufleet.config import GpufleetConfig
from gpufleet.service.assembly import build
from gpufleet.service.runtime import Service
from gpufleet.service.service_config import ServiceConfig
from harness.k8s_sim import small_scenario
from observer.fleet.field_presence import SHIPPED_DEFAULT_FIELDS
from observer.scrape.collector import ScrapeSettings
from remediations.store import Store
from remediations.types import Verdict
from simulator.serve import SimulationHandle, start_simulation
from tests.service.procs import wait_for
from tests.service.test_diagnose_sim import service_policy

XID = "DCGM_FI_DEV_XID_ERRORS"


@pytest.fixture
def handle(tmp_path: Path) -> Iterator[SimulationHandle]:
    sc = small_scenario().model_copy(update={"start": float(int(time.time()))})
    h = start_simulation(
        sc,
        speed=20.0,
        kubeconfig_out=tmp_path / "kubeconfig",
        fields=SHIPPED_DEFAULT_FIELDS - {XID},
    )
    yield h
    h.stop()


@pytest.fixture
def service(handle: SimulationHandle, tmp_path: Path) -> Iterator[Service]:
    discovery = f"{handle.metrics_url}/targets"
    cfg = GpufleetConfig.model_validate(
        {
            "cluster": "small",
            "store_url": f"sqlite:///{tmp_path / 'j.db'}",
            "service": ServiceConfig.model_validate(
                {"interval": 0.5, "source": {"discovery_url": discovery}, "http": {"port": 0}}
            ),
        }
    )
    parts, _ = build(
        cfg,
        service_policy(),
        "coverage-test",
        store=Store.open(cfg.store_url, cluster="small"),
        kubeconfig=str(handle.kubeconfig),
        scrape=ScrapeSettings(discovery_url=discovery, cluster="small"),
        clock=time.time,
        interval=0.5,
    )
    svc = Service(parts).start()
    yield svc
    assert svc.shutdown() == 0


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return str(r.read().decode())


def _coverage_gauge(exposition: str) -> dict[tuple[str, str], float]:
    """(detector, state) -> value of gpufleet_detector_coverage in a Prometheus exposition."""
    out: dict[tuple[str, str], float] = {}
    for line in exposition.splitlines():
        if line.startswith("gpufleet_detector_coverage{"):
            labels, value = line.rsplit(" ", 1)
            d = re.search(r'detector="([^"]*)"', labels)
            s = re.search(r'state="([^"]*)"', labels)
            assert d is not None and s is not None, line
            out[(d.group(1), s.group(1))] = float(value)
    return out


def test_a_detector_without_its_field_is_never_silent(
    service: Service, caplog: pytest.LogCaptureFixture
) -> None:
    wait_for(
        lambda: "detector_coverage" in json.loads(_get(service.http.url + "/readyz")),
        30,
        "coverage on /readyz",
    )
    ready = json.loads(_get(service.http.url + "/readyz"))
    states = ready["detector_coverage"]
    assert states["gpu_xid"] == "cannot_run", states
    assert states["gpu_memory"] == "reduced" and states["gpu_throttle"] == "reduced", states
    assert states["gpu_idle"] == "full", states
    assert XID in ready["fields_missing"]

    # /readyz learns the coverage when the cycle collects; the gauge is recorded when it ends.
    wait_for(
        lambda: ("gpu_xid", "cannot_run") in _coverage_gauge(_get(service.http.url + "/metrics")),
        30,
        "coverage gauge on /metrics after the first cycle",
    )
    gauge = _coverage_gauge(_get(service.http.url + "/metrics"))
    assert gauge[("gpu_xid", "cannot_run")] == 1.0 and gauge[("gpu_xid", "full")] == 0.0
    assert gauge[("gpu_throttle", "reduced")] == 1.0 and gauge[("gpu_idle", "full")] == 1.0
    assert sum(gauge.values()) == len(states)  # one state per detector

    def notice_in_last_cycle() -> bool:
        r = service.last_report
        return r is not None and any(
            f.detector == "coverage" and "gpu_xid cannot run" in f.summary for f in r.findings
        )

    wait_for(notice_in_last_cycle, 30, "the gpu_xid notice among the cycle's findings")
    assert service.last_report is not None
    notice = next(f for f in service.last_report.findings if f.detector == "coverage")
    assert (notice.kind, notice.severity) == (FindingKind.MONITORING_GAP, Severity.INFO)
    assert f"{XID}, gauge," in (notice.recommended_action or "")
    assert service.last_report.ok, service.last_report.errors  # the notice passes the policy
    assert all(d.decision is not Verdict.EXECUTE for d in service.last_report.decisions)

    # the first cycle may run before the test body
    records = [*caplog.get_records("setup"), *caplog.records]
    logged = "\n".join(r.getMessage() for r in records if r.name == "gpufleet.live_cycle")
    assert "field coverage" in logged and "gpu_xid: CANNOT RUN" in logged, logged
