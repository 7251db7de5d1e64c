"""XIDs read as the driver reports them, through both collectors, from a real exporter layout.

The simulated dcgm-exporter writes the 4.x layout (simulator.xid_series): a sticky last-XID
gauge that shows a cascade's follower, and one count series per code in a random order. Issue
27's findings 1 and 2: the uncontained/ECC XID hidden behind its follower 45, and the per-code
count flipping (scrape) or summed (Prometheus) into a wrong code and a wrong number.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from detectors import gpu_xid
from detectors.findings import Finding, Severity
from observer.fleet.catalog import XID_COUNT_METRIC, xid_count_column
from observer.fleet.model import FleetSnapshot
from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.plan import PromSettings
from observer.scrape.collector import ScrapeCollector, ScrapeSettings
from simulator.clock import ManualWall
from simulator.cluster import ClusterOptions
from simulator.scenario import Scenario, scenario_from_dict
from simulator.serve import start_simulation
from tests.prometheus_fixture import start_prometheus, write_scenario

MIN = 60.0
NODE = "h100-0000"
LAST = 5 * MIN  # the cycle the assertions read: every XID is inside the 5-minute window


def _scenario() -> Scenario:
    def app(code: int, start: str) -> dict[str, Any]:
        return {"kind": "app_xid", "node": NODE, "gpu": 0, "xid": code, "start": start,
                "end": "30m"}  # fmt: skip

    return scenario_from_dict(
        {
            "name": "xid-real-exporter",
            "duration": 1800,
            "pools": [{"name": "h100", "model": "H100", "nodes": 1, "gpus_per_node": 2}],
            # GPU 1: an ECC error (48), which the driver follows with 45 within milliseconds
            "faults": [{"kind": "xid48_dbe", "node": NODE, "gpu": 1, "start": "130s"}],
            # GPU 0: a page fault twice (31: NVIDIA says diag when it repeats), then a graphics
            # exception (13) and its follower 43
            "confounders": [app(31, "70s"), app(31, "100s"), app(13, "190s")],
            "exporter": {"version": "4.x"},
        }
    )


def _detect(snapshots: Sequence[FleetSnapshot]) -> list[Finding]:
    """gpu_xid over the cycles in order; the findings of the last cycle."""
    state = None
    found: list[Finding] = []
    for snap in snapshots:
        found, state = gpu_xid.detect(snap, state, snap.taken_at, gpu_xid.Params())
    return found


def _by_gpu(found: list[Finding], snap: FleetSnapshot) -> dict[int, Finding]:
    uuids = snap.gpus.uuid.tolist()
    return {int(snap.gpus.device_index[uuids.index(f.gpu_uuid)]): f for f in found}


def _gpu_row(snap: FleetSnapshot, device: int) -> int:
    return int(next(i for i in range(len(snap.gpus)) if snap.gpus.device_index[i] == device))


@pytest.fixture(scope="module")
def direct_scrape() -> list[FleetSnapshot]:
    sc = _scenario()
    wall = ManualWall(sc.start)
    handle = start_simulation(sc, wall=wall, options=ClusterOptions(startup_seconds=0))
    settings = ScrapeSettings(discovery_url=f"{handle.metrics_url}/targets")
    snaps = []
    try:
        with ScrapeCollector(settings, now=handle.clock.scenario_time) as c:
            snaps.append(c.collect().snapshot)
            while handle.clock.scenario_time() < sc.start + LAST:
                wall.advance(30)
                snaps.append(c.collect().snapshot)
    finally:
        handle.stop()
    return snaps


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> list[FleetSnapshot]:
    sc = _scenario()
    tmp = tmp_path_factory.mktemp("xid-prom")
    om = write_scenario(sc, tmp / "xid.om", sc.start, sc.start + LAST + MIN)
    prom = start_prometheus(om, tmp)
    try:
        with PrometheusCollector(PromSettings(prom.url)) as pc:
            return [pc.collect(sc.start + k * 30.0).snapshot for k in range(int(LAST / 30) + 1)]
    finally:
        prom.stop()


COLLECTORS = [
    "direct_scrape",
    pytest.param("prometheus", marks=pytest.mark.prometheus),
]


@pytest.mark.parametrize("collector", COLLECTORS)
def test_a_cascade_follower_in_the_gauge_never_hides_the_xid_it_follows(
    collector: str, request: pytest.FixtureRequest
) -> None:
    """Finding 1: the gauge says 45; the count says 48 happened first: 48 is the fault."""
    snaps: list[FleetSnapshot] = request.getfixturevalue(collector)
    ecc = _by_gpu(_detect(snaps), snaps[-1])[1]
    assert (ecc.evidence["xid"], ecc.severity) == (48, Severity.CRITICAL)
    assert ecc.evidence["last_xid_gauge"] == 45
    assert ecc.evidence["xids_in_window"] == {"45": 1, "48": 1}
    assert not ecc.pre_existing


@pytest.mark.parametrize("collector", COLLECTORS)
def test_the_per_code_count_is_read_per_code_whatever_the_series_order(
    collector: str, request: pytest.FixtureRequest
) -> None:
    """Finding 2: every code counted once per occurrence; the scrape's random series order
    does not flip one GPU's count between codes, and Prometheus does not sum them into one."""
    snaps: list[FleetSnapshot] = request.getfixturevalue(collector)
    app = _by_gpu(_detect(snaps), snaps[-1])[0]
    assert (app.evidence["xid"], app.evidence["occurrences"]) == (31, 2)
    assert app.severity == Severity.WARNING  # a repeated page fault on one GPU: diag
    assert app.evidence["last_xid_gauge"] == 43
    assert app.evidence["xids_in_window"] == {"13": 1, "31": 2, "43": 1}
    last = snaps[-1]
    i0 = _gpu_row(last, 0)
    assert last.metrics[XID_COUNT_METRIC].value[i0] == 4.0  # 31, 31, 13, 43
    assert last.metrics[xid_count_column(31)].value[i0] == 2.0
