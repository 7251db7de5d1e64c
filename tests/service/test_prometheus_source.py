"""`gpufleet run` on a Prometheus source, against a real Prometheus behind a gateway that demands
what hosted backends demand (a path prefix, a bearer token, a tenant header).

- The service's cycles and `gpufleet detect --at T` (the same collector, replayed) give the same
  findings at T.
- Every cycle asks the same number of requests whatever the fleet holds (O(1) in its size).
- A rotated token file is read again; a refused token makes the cycle a collection failure
  (a monitoring gap): no incident resolves, nothing acts.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml

from errors import PermanentError
from gpufleet.cli import main
from gpufleet.config import GpufleetConfig
from gpufleet.service.assembly import build
from gpufleet.service.source_config import PrometheusSource
from gpufleet.service.sources import prom_settings, source_settings
from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.plan import plan
from remediations.policy import load_policy
from remediations.store import Store
from simulator.clock import ManualWall, SimClock
from simulator.cluster import ClusterOptions, SimCluster
from simulator.kube_api.server import KubeApiServer
from simulator.scenario import Scenario, scenario_from_dict
from tests.auth_proxy import AuthProxy
from tests.prometheus_fixture import PrometheusHandle, served_scenario
from tests.test_cli_detect_backtest_eval import TINY
from tests.tls_certs import make_certs

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]
PREFIX = "/select/0/prometheus"
TENANT = {"X-Scope-OrgID": "gpu-team"}
STEP = 15.0
WARMUP = 300.0


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return scenario_from_dict(TINY, "tiny")


@pytest.fixture(scope="module")
def prom(
    scenario: Scenario, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusHandle]:
    yield from served_scenario(scenario, tmp_path_factory.mktemp("prom-source"))


def _write_token(path: Path, token: str) -> None:
    """As the kubelet rotates a projected token: a new file renamed over the old one."""
    tmp = path.with_suffix(".new")
    tmp.write_text(token + "\n")
    os.replace(tmp, path)


def _key(f: dict[str, object]) -> tuple[str, str, str, str, str]:
    return tuple(str(f.get(k) or "") for k in ("kind", "severity", "node", "gpu_uuid", "job"))  # type: ignore[return-value]


def test_run_and_detect_agree_through_an_authenticating_gateway(
    prom: PrometheusHandle, scenario: Scenario, tmp_path: Path
) -> None:
    at = scenario.start + 14 * 60  # the hung job (10-15 min) and the XID 48 (5 min) both open
    token = tmp_path / "token"
    _write_token(token, "first")
    gw = AuthProxy(prom.url, prefix=PREFIX, token="first", headers=TENANT)
    config = {
        "cluster": "tiny",
        "store_url": f"sqlite:///{tmp_path / 'journal.db'}",
        "service": {
            "http": {"port": 0},
            "source": {
                "prometheus": {
                    "url": gw.url,
                    "bearer_token_file": str(token),
                    "headers": TENANT,
                    "timeout": "5s",
                }
            },
        },
    }
    cfg_file = tmp_path / "gpufleet.yaml"
    cfg_file.write_text(yaml.safe_dump(config))
    cfg = GpufleetConfig.model_validate(config)
    settings = source_settings(cfg.service.source, cfg.cluster)
    assert settings is not None

    # The Kubernetes API of the same fleet, its scenario clock standing at the detect instant.
    wall = ManualWall()
    clock = SimClock(scenario.start, wall=wall, wall0=wall() - (at - scenario.start))
    cluster = SimCluster(scenario, clock=clock, options=ClusterOptions(startup_seconds=0))
    api = KubeApiServer(cluster, bookmark_interval=0.2).start()
    now = [at - WARMUP]
    store = Store.open(cfg.store_url, cluster=cfg.cluster)
    parts, _ = build(
        cfg,
        load_policy(None),
        "prom-source-test",
        store=store,
        kubeconfig=str(api.write_kubeconfig(tmp_path / "kubeconfig")),
        scrape=settings,
        clock=lambda: now[0],
        interval=STEP,
    )
    requests_per_cycle: list[int] = []
    try:
        report = None
        while now[0] <= at:
            before = len(gw.seen)
            report = parts.live.run_once(now[0])
            assert report.ok, report.errors
            requests_per_cycle.append(len(gw.seen) - before)
            now[0] += STEP
        assert report is not None and report.now == at
        service_findings = {_key(f.to_json()) for f in report.findings}
        open_before = len(store.open_incidents())
        assert open_before > 0

        # A rotated token is read again on the next request.
        _write_token(token, "second")
        gw.token = "second"
        assert parts.live.run_once(at).ok

        # A refused token: no snapshot, so a monitoring gap; nothing resolves, nothing acts.
        gw.token = "revoked"
        failed = parts.live.run_once(at + STEP)
        assert not failed.ok and failed.errors[0].stage == "collect"
        assert "HTTP 401" in failed.errors[0].message
        assert {f.kind.value for f in failed.findings} <= {"monitoring_gap"}
        assert failed.touched == () and all(c.change != "resolved" for c in failed.changes)
        assert len(store.open_incidents()) >= open_before
        gw.token = "second"
    finally:
        parts.loop.close(5.0)
        for close in reversed(parts.closers):
            close()
        parts.telemetry.close()
        api.stop()

    # O(1): the cold cycle asks the whole plan, every later cycle the same smaller set.
    queries = plan(settings)  # type: ignore[arg-type]
    assert requests_per_cycle[0] == len(queries)
    assert set(requests_per_cycle[1:]) == {sum(not q.cold for q in queries)}
    assert all(path.startswith(PREFIX + "/api/v1/") for path, _ in gw.seen)

    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(["detect", "--prometheus-url", prom.url, "--at", str(at), "--config",
                   str(cfg_file), "--format", "json", "--warmup", f"{WARMUP:g}s",
                   "--step", f"{STEP:g}s", "--fail-on", "never"])  # fmt: skip
    assert rc == 0
    detected = {_key(f) for f in json.loads(out.getvalue())["findings"]}
    kinds = {k[0] for k in detected}
    assert {"gpu_xid", "nccl_hang"} <= kinds, detected
    assert service_findings == detected
    gw.close()


def test_basic_auth_from_a_file_over_mutual_tls(
    prom: PrometheusHandle, scenario: Scenario, tmp_path: Path
) -> None:
    certs = make_certs(tmp_path / "tls")
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    tls = (str(certs.server_cert), str(certs.server_key), str(certs.ca))
    at = scenario.start + 6 * 60

    def source(**tls_settings: str) -> PrometheusSource:
        return PrometheusSource.model_validate({
            "url": gw.url, "timeout": 5, "retries": 0, "tls": tls_settings,
            "basic_auth": {"username": "reader", "password_file": str(password)},
        })  # fmt: skip

    with AuthProxy(prom.url, basic=("reader", "s3cret"), tls=tls) as gw:
        full = {"ca_file": str(certs.ca), "cert_file": str(certs.client_cert),
                "key_file": str(certs.client_key)}  # fmt: skip
        with PrometheusCollector(prom_settings(source(**full), "tiny")) as c:
            snap = c.collect(at).snapshot
        assert len(snap.gpus) == 24 and snap.telemetry is not None and snap.telemetry.source_ok

        # The server's certificate is not trusted without the CA bundle: refused, no snapshot.
        without_ca = {k: v for k, v in full.items() if k != "ca_file"}
        untrusted = PrometheusCollector(prom_settings(source(**without_ca), "tiny"))
        with untrusted as c, pytest.raises(PermanentError, match="TLS"):
            c.collect(at)

        # A wrong password: refused with the status, not an empty fleet.
        password.write_text("wrong\n")
        refused = PrometheusCollector(prom_settings(source(**full), "tiny"))
        with refused as c, pytest.raises(PermanentError, match="HTTP 401"):
            c.collect(at)
