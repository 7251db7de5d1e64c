"""Incidents page: the metrics the detector used, ±30 min around an incident's start, read from a
real Prometheus holding a simulated window (an XID 48 on one GPU), with the peers' median."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd  # type: ignore[import-untyped]
import pytest

from dashboards import data, history
from harness.dashboard_seed import seed_fleet, write_settings
from remediations.store import IncidentRecord, Store
from remediations.types import IncidentId, IncidentStatus
from simulator.layout import gpu_uuid
from simulator.scenario import Scenario, scenario_from_dict
from tests.prometheus_fixture import PrometheusFactory, PrometheusHandle, served_scenario
from tests.test_cli_detect_backtest_eval import TINY, UNREACHABLE, _xid_gpu
from tests.test_dashboard_pages import app, texts


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    data.changed()
    data.store.clear()
    history.around.clear()
    yield
    data.store.clear()


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return scenario_from_dict(TINY, "tiny")


@pytest.fixture(scope="module")
def prom(
    scenario: Scenario, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusHandle]:
    yield from served_scenario(scenario, tmp_path_factory.mktemp("history"))


def _seed(tmp_path: Path, gpu: str, opened: float) -> str:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    store = Store.open(url, cluster="alpha")
    store.save_incidents([
        IncidentRecord(
            id=IncidentId("xid0001"), cluster="alpha", kind="gpu_xid", entity_key=f"gpu_xid|{gpu}",
            node="h100-0001", gpu_uuid=gpu, job=None, status=IncidentStatus.OPEN,
            severity="critical", summary=f"XID 48 on {gpu}", opened_at=opened,
            updated_at=opened, resolved_at=None, first_seen=opened, last_seen=opened + 60,
            seen_cycles=3, healthy_cycles=0, evidence={"xid": 48.0, "threshold_count": 1.0},
        )
    ])  # fmt: skip
    store.close()
    return url


def test_detector_fields_come_from_its_declared_needs() -> None:
    assert history.fields_for("gpu_xid")[0] == "DCGM_FI_DEV_XID_ERRORS"
    assert history.fields_for("no_such_kind") == ()


@pytest.mark.prometheus
def test_incident_shows_its_gpu_and_peers_around_its_start(
    prom: PrometheusHandle, scenario: Scenario, tmp_path: Path
) -> None:
    gpu = _xid_gpu(scenario)
    opened = scenario.start + 300
    url = _seed(tmp_path, gpu, opened)
    frame = history.around(prom.url, gpu, "gpu_xid", opened)
    xid = frame[frame["field"] == "DCGM_FI_DEV_XID_ERRORS"]
    assert set(xid["series"]) == {"this GPU", "peers' median"}
    mine = xid[xid["series"] == "this GPU"]
    before = mine[mine["t"] < pd.Timestamp(opened - 30, unit="s", tz="UTC")]["value"]
    assert mine["value"].max() == 48.0 and not (before == 48.0).any()  # the fault starts at 5m
    settings = write_settings(tmp_path / "s.json", url, "alpha", prometheus_url=prom.url)
    at = app(settings, "page_files/incidents.py")
    assert not at.exception, at.exception
    assert "Around its start" in texts(at)
    assert "No history charts" not in texts(at)
    assert not at.warning
    # the timeline, no evidence panel (an XID's evidence compares nothing with peers: one panel
    # per compared metric), then one chart per field the XID detector reads that Prometheus holds
    fields = set(frame["field"])
    assert len(at.get("vega_lite_chart")) == 1 + len(fields)


@pytest.mark.prometheus
def test_an_a100s_peers_are_the_other_a100s_not_the_h100_majority(
    prom: PrometheusHandle, scenario: Scenario
) -> None:
    a100 = gpu_uuid(scenario.cluster, "a100-0000", 0)
    at = scenario.start + 900
    frame = history.around(prom.url, a100, "gpu_throttle", at)
    clock = frame[frame["field"] == "DCGM_FI_DEV_SM_CLOCK"]
    peers = clock[clock["series"] == "peers' median"]["value"]
    model = str(prom.query(f'DCGM_FI_DEV_SM_CLOCK{{UUID="{a100}"}}', at)[0]["metric"]["modelName"])
    a100s = [
        float(r["value"][1]) for r in prom.query(f'DCGM_FI_DEV_SM_CLOCK{{modelName="{model}"}}', at)
    ]
    fleet = prom.query(f'quantile(0.5, DCGM_FI_DEV_SM_CLOCK{{UUID!="{a100}"}})', at)
    fleet_median = float(fleet[0]["value"][1])
    # Like with like: the peers' median is an A100 clock, never the H100 majority's.
    assert len(peers) and not min(a100s) <= fleet_median <= max(a100s)
    assert peers.between(min(a100s), max(a100s)).all()


def test_without_prometheus_it_says_why_there_are_no_charts(tmp_path: Path) -> None:
    url = _seed(tmp_path, "GPU-x", 1_767_225_900.0)
    settings = write_settings(tmp_path / "s.json", url, "alpha")
    at = app(settings, "page_files/incidents.py")
    assert "dashboard.prometheus_url" in texts(at)


@pytest.mark.prometheus
def test_a_jobs_ranks_over_time_come_from_prometheus(
    prom: PrometheusHandle, scenario: Scenario
) -> None:
    uuids = tuple(
        gpu_uuid(scenario.cluster, f"h100-{n:04d}", d) for n in range(2) for d in range(2)
    )
    field = history.fields_for("straggler")[0]
    frame = history.ranks_over(prom.url, uuids, field, scenario.start, scenario.end)
    assert set(frame["uuid"]) == set(uuids)
    assert frame.groupby("uuid")["t"].nunique().min() > 10  # a time axis, not a last reading


@pytest.mark.parametrize("with_prometheus", [False, True])
def test_jobs_page_says_where_the_ranks_history_comes_from(
    tmp_path: Path, with_prometheus: bool
) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    store = Store.open(url, cluster="alpha")
    seed_fleet(store, 256, cycles=2)
    store.close()
    extra = {"prometheus_url": UNREACHABLE} if with_prometheus else {}
    settings = write_settings(tmp_path / "s.json", url, "alpha", **extra)
    at = app(settings, "page_files/jobs.py")
    assert not at.exception, at.exception
    if with_prometheus:
        assert "could not answer" in texts(at)  # said on the page, not a crash
    else:
        assert "dashboard.prometheus_url" in texts(at)


@pytest.mark.prometheus
def test_the_peers_median_is_not_drawn_over_the_few_peers_scraped_first(
    tmp_path: Path, prometheus_factory: PrometheusFactory
) -> None:
    """The demo's first scrape interval: one peer's exporter answered (an idle clock), the other
    three not yet. The old chart drew that one reading as the peers' median, a ramp to 1,980."""
    t0 = 1_767_225_600
    model = 'modelName="NVIDIA H200"'
    lines = ["# TYPE DCGM_FI_DEV_SM_CLOCK gauge"]
    for t in range(t0, t0 + 1200, 15):
        lines.append(f'DCGM_FI_DEV_SM_CLOCK{{UUID="GPU-me",{model}}} 345 {t}')
    for peer in range(4):
        for t in range(t0 if peer == 0 else t0 + 60, t0 + 1200, 15):
            v = 345 if t < t0 + 60 else 1980
            lines.append(f'DCGM_FI_DEV_SM_CLOCK{{UUID="GPU-p{peer}",{model}}} {v} {t}')
    om = tmp_path / "first-scrapes.om"
    om.write_text("\n".join(lines) + "\n# EOF\n")
    prom = prometheus_factory(om)
    frame = history.around(prom.url, "GPU-me", "gpu_throttle", t0 + 600.0)
    clock = frame[frame["field"] == "DCGM_FI_DEV_SM_CLOCK"]
    mine = clock[clock["series"] == "this GPU"]
    peers = clock[clock["series"] == "peers' median"]
    assert mine["t"].min() == pd.Timestamp(t0, unit="s", tz="UTC")  # this GPU from the start
    assert peers["t"].min() == pd.Timestamp(t0 + 60, unit="s", tz="UTC")
    assert set(peers["value"]) == {1980.0}  # never the one early peer's idle clock
