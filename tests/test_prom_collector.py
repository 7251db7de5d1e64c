"""The Prometheus collector against a real Prometheus holding backfilled simulator output."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from errors import GpufleetError
from observer.fleet.model import FleetSnapshot, JobKey
from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.plan import PromSettings
from observer.snapshot.gc_pause import paused_gc
from simulator.scenario import Scenario, scenario_from_dict
from tests.http_proxy import FaultyProxy
from tests.prometheus_fixture import (
    PrometheusFactory,
    PrometheusHandle,
    start_prometheus,
    write_scenario,
)
from tests.simulator_cases import EVERY_FAULT_FLEET, MIN, small

pytestmark = [pytest.mark.prometheus]
IDENTITY_QUERY = r"query=max by \(UUID, GPU_I_ID, GPU_I_PROFILE"


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    return small()


def _prom(scenario: Scenario, tmp: Path, lookback: str | None) -> PrometheusHandle:
    om = write_scenario(scenario, tmp / "small.om", scenario.start, scenario.start + 16 * MIN)
    return start_prometheus(om, tmp, lookback)


@pytest.fixture(scope="module")
def prom(
    scenario: Scenario, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusHandle]:
    handle = _prom(scenario, tmp_path_factory.mktemp("prom"), None)
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def prom_1m(
    scenario: Scenario, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusHandle]:
    handle = _prom(scenario, tmp_path_factory.mktemp("prom1m"), "1m")
    yield handle
    handle.stop()


def test_snapshot_at_ten_minutes(prom: PrometheusHandle, scenario: Scenario) -> None:
    t = scenario.start + 10 * MIN
    with PrometheusCollector(PromSettings(prom.url)) as c:
        r = c.collect(t)
    s = r.snapshot
    assert s.taken_at == t and r.stats.problems == () and s.telemetry is not None
    assert s.telemetry.source_ok and s.telemetry.scrape_interval == 30.0
    assert len(s.gpus) == 40 and len(s.nodes) == 5 and all(n.in_kubernetes for n in s.nodes)
    names = [str(n.name) for n in s.nodes]
    assert names == sorted(names)
    util = s.metrics["DCGM_FI_DEV_GPU_UTIL"]
    lost = s.gpus.position(str(s.gpus.uuid[(s.gpus.node_index == names.index("h100-0002"))
                                            & (s.gpus.device_index == 0)][0]))  # fmt: skip
    assert np.isnan(util.value[lost]) and np.isnan(util.timestamp[lost])  # XID 79: row, no data
    assert np.count_nonzero(~np.isnan(util.value)) == 39
    assert np.nanmax(util.timestamp) == t
    xid = s.metrics["DCGM_FI_DEV_XID_ERRORS"].value
    assert sorted(xid[xid > 0].tolist()) == [48.0, 64.0]
    dbe = s.metrics["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]
    assert dbe.increase is not None and dbe.window_seconds == 120.0
    hit = np.count_nonzero(dbe.value > 0)  # XID 48 and the row-remap failure GPUs
    assert hit == 2 and np.count_nonzero(dbe.value == 0) == 39 - hit  # sparse answer, 0-filled
    assert np.count_nonzero(dbe.increase == 0) == 39  # the XID 48 DBEs came at 5 minutes
    crc = s.metrics["DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"].rate()
    assert np.nanmax(crc) > 100  # the CRC storm on h100-0002 gpu 5
    jobs = {j.key: [s.pods[i].name for i in j.pod_indices] for j in s.jobs}
    assert jobs == {
        "default/train": ["train-worker-0", "train-worker-1"],
        "research/hangjob": ["hangjob-worker-0"],
    }
    assert [s.pods[i].rank for i in s.jobs[0].pod_indices] == [0, 1]
    assert s.job_steps[JobKey("default/train")] == pytest.approx(1200.0)
    assert s.job_steps_increase[JobKey("default/train")] == pytest.approx(240.0, rel=0.02)
    train_gpus = s.gpus_of_job(0)
    assert len(train_gpus) == 16
    assert "job" not in s.pods[s.jobs[0].pod_indices[0]].labels  # Prometheus' target labels go
    gpus = {str(n.name): (n.gpu_allocatable, n.gpu_capacity) for n in s.nodes}
    assert gpus.pop("h100-0002") == (5, 8)  # XIDs 79, 48, 64: the device plugin withdrew three
    assert set(gpus.values()) == {(8, 8)}  # kube_node_status_allocatable{resource="nvidia_com_gpu"}


def test_exporter_down_and_lookback(
    prom: PrometheusHandle, prom_1m: PrometheusHandle, scenario: Scenario
) -> None:
    t = scenario.start + 7 * MIN  # a100-0001's exporter is down from 5 to 8 minutes
    for handle, lookback in ((prom, 300.0), (prom_1m, 60.0)):
        with PrometheusCollector(PromSettings(handle.url)) as c:
            s = c.collect(t).snapshot
        assert s.telemetry is not None
        names = [str(n.name) for n in s.nodes]
        down = names.index("a100-0001")
        age = s.telemetry.node_age(t)
        assert not s.telemetry.node_up[down]
        assert np.all(s.telemetry.node_up[[i for i in range(5) if i != down]])
        assert age[down] >= 60.0 and np.all(np.delete(age, down) <= 30.0)
        on_node = s.gpus.node_index == down
        assert np.count_nonzero(on_node) == 8  # the GPUs stay rows ...
        stamps = s.metrics["DCGM_FI_DEV_GPU_UTIL"].timestamp[on_node]
        if lookback == 60.0:  # ... with no sample within the 1 m lookback
            assert np.all(np.isnan(stamps))
        else:  # ... or their old one (backfill has no staleness markers)
            assert np.all(t - stamps >= 120.0)


def test_queries_per_cycle_do_not_grow_with_the_fleet(
    prometheus_factory: PrometheusFactory, prom: PrometheusHandle, scenario: Scenario
) -> None:
    big = dict(EVERY_FAULT_FLEET, name="bigger", duration="4m", faults=[], confounders=[])
    big["pools"] = [{"name": "h100", "model": "H100", "nodes": 24}]
    big["workloads"] = [{"name": "train", "kind": "training", "pool": "h100", "replicas": 20}]
    sc_big = scenario_from_dict(big)
    big_prom = prometheus_factory(sc_big)
    counts: list[tuple[list[str], list[str]]] = []
    for url, t, gpus in ((prom.url, scenario.start + 3 * MIN, 40),
                         (big_prom.url, sc_big.start + 3 * MIN, 192)):  # fmt: skip
        with PrometheusCollector(PromSettings(url)) as c:
            r = c.collect(t)
            warm = c.collect(t + 30)
        assert len(r.snapshot.gpus) == len(warm.snapshot.gpus) == gpus
        counts.append(([q.name for q in r.stats.queries], [q.name for q in warm.stats.queries]))
    assert counts[0] == counts[1]
    assert len(counts[0][0]) == 23 and len(counts[0][1]) == 14  # cold start, then warm


@pytest.mark.parametrize("minute", [9, 3])  # at 3-5 min the hangjob's new pod labels are
def test_range_replay_matches_instant_cycles(  # 1-3 min old: its GPUs' old series linger
    prom: PrometheusHandle, scenario: Scenario, minute: int
) -> None:
    t0 = scenario.start + minute * MIN
    settings = PromSettings(prom.url, range_chunk=60.0)  # 5 steps -> 3 chunks
    with PrometheusCollector(settings) as c:
        replay = list(c.collect_range(t0, t0 + 120, 30))
    with PrometheusCollector(settings) as c:  # warm cycles in time order, as the replay steps
        instant = [c.collect(t0 + k * 30).snapshot for k in range(3)][-1]
    assert [r.snapshot.taken_at for r in replay] == [t0 + k * 30 for k in range(5)]
    snap = replay[2].snapshot
    assert np.array_equal(snap.gpus.uuid, instant.gpus.uuid)
    for name, col in instant.metrics.items():  # the range path parses gauges as arrays
        np.testing.assert_array_equal(snap.metrics[name].value, col.value, err_msg=name)
        np.testing.assert_array_equal(snap.metrics[name].timestamp, col.timestamp, err_msg=name)
        if col.increase is not None:
            inc = snap.metrics[name].increase
            assert inc is not None
            np.testing.assert_allclose(inc, col.increase, err_msg=name)
    assert snap.job_steps == instant.job_steps


def test_prometheus_stopped_raises(
    prometheus_factory: PrometheusFactory, scenario: Scenario
) -> None:
    sc = scenario.model_copy(update={"duration": 120.0, "faults": [], "confounders": []})
    handle = prometheus_factory(sc)
    handle.stop()
    settings = PromSettings(handle.url, retries=1, backoff=0.05)
    with PrometheusCollector(settings) as c, pytest.raises(GpufleetError) as err:
        c.collect(sc.start + 60)
    assert err.value.temporary and "unreachable" in str(err.value)
    assert handle.url in str(err.value) and "--prometheus-url" in err.value.hint


def test_slow_prometheus_through_a_proxy(prom: PrometheusHandle, scenario: Scenario) -> None:
    t = scenario.start + 10 * MIN
    with FaultyProxy(prom.url) as proxy:
        slow_kube = proxy.rule(r"kube_pod_info\|", delay=1.5)
        settings = PromSettings(proxy.url, timeout=0.5, retries=1, backoff=0.05)
        with PrometheusCollector(settings) as c:
            r = c.collect(t)
            s = r.snapshot
            assert s.telemetry is not None and not s.telemetry.source_ok
            assert "query kube failed: timed out" in s.telemetry.degraded_reason
            assert slow_kube.hits == 2  # one retry
            assert len(s.gpus) == 40  # the rest of the cycle is there
            assert not any(n.in_kubernetes for n in s.nodes)  # no kube-state-metrics this time
            proxy.rule(IDENTITY_QUERY, delay=1.5)
            with pytest.raises(GpufleetError) as err:
                c.collect(t)
    assert err.value.temporary and "timed out" in str(err.value)


def test_5xx_warnings_and_result_type_through_a_proxy(
    prom: PrometheusHandle, scenario: Scenario
) -> None:
    t = scenario.start + 10 * MIN

    def warn(body: bytes) -> bytes:
        doc = json.loads(body)
        doc["warnings"] = ["PromQL info: partial response from store eu-1"]
        return json.dumps(doc).encode()

    with FaultyProxy(prom.url) as proxy:
        failing = proxy.rule(r"increase\(DCGM_FI_DEV_PCIE_REPLAY_COUNTER", status=503)
        proxy.rule(r"kube_pod_status_phase", mutate=warn)
        settings = PromSettings(proxy.url, retries=2, backoff=0.01)
        with PrometheusCollector(settings) as c:
            r = c.collect(t)
        assert failing.hits == 3
        s = r.snapshot
        assert s.telemetry is not None and not s.telemetry.source_ok
        reason = s.telemetry.degraded_reason
        assert "increase:DCGM_FI_DEV_PCIE_REPLAY_COUNTER failed: HTTP 503" in reason
        assert "partial response from store eu-1" in reason
        replays = s.metrics["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"]
        assert replays.increase is None or np.all(np.isnan(replays.increase))
        assert np.count_nonzero(~np.isnan(replays.value)) == 39  # its value came in the batch
        proxy.rules.clear()
        proxy.rule(r"query=up\{", mutate=lambda b: b.replace(b'"vector"', b'"scalar"'))
        with PrometheusCollector(settings) as c:
            s = c.collect(t).snapshot
        assert s.telemetry is not None and "query up failed: resultType 'scalar'" in (
            s.telemetry.degraded_reason
        )
        proxy.rules.clear()
        proxy.rule(IDENTITY_QUERY, status=400)
        with PrometheusCollector(settings) as c, pytest.raises(GpufleetError) as err:
            c.collect(t)
        assert not err.value.temporary and "HTTP 400" in str(err.value)


def test_warm_cycles_agree_with_a_cold_start(prom: PrometheusHandle, scenario: Scenario) -> None:
    """Cycles in time order skip the cold-start queries and answer them from memory."""
    counts: list[int] = []
    with PrometheusCollector(PromSettings(prom.url)) as warm:
        for minute in (7.0, 10.5):  # a100-0001's exporter down (5-8 min); GPU lost at 5 min
            while True:
                t = scenario.start + 3 * MIN + 30 * len(counts)
                r = warm.collect(t)
                counts.append(r.stats.query_count)
                if t >= scenario.start + minute * MIN:
                    break
            with PrometheusCollector(PromSettings(prom.url)) as cold:
                assert_same(r.snapshot, cold.collect(t).snapshot)
    assert counts[0] == 23 and set(counts[1:]) == {14}


def assert_same(a: FleetSnapshot, b: FleetSnapshot) -> None:
    assert a.gpus.uuid.tolist() == b.gpus.uuid.tolist()
    assert a.telemetry is not None and b.telemetry is not None
    np.testing.assert_array_equal(a.telemetry.node_up, b.telemetry.node_up)
    np.testing.assert_allclose(a.telemetry.node_last_sample, b.telemetry.node_last_sample)
    assert a.telemetry.scrape_interval == b.telemetry.scrape_interval == 30.0
    for name, col in a.metrics.items():
        np.testing.assert_array_equal(col.value, b.metrics[name].value, err_msg=name)


def test_compression_is_a_wire_choice_only(prom: PrometheusHandle, scenario: Scenario) -> None:
    """`compress` changes what Prometheus sends (gzip or plain JSON), never the snapshot; the
    GC pause around a cycle leaves the garbage collector as it found it."""
    t = scenario.start + 10 * MIN
    snaps, encodings = [], []
    for compress in (False, True):
        seen: list[str] = []
        with PrometheusCollector(PromSettings(prom.url, compress=compress)) as c:
            session = c.api._session
            session.hooks["response"].append(
                lambda r, *a, seen=seen, **k: seen.append(r.headers.get("Content-Encoding", ""))
            )
            assert gc.isenabled()
            snaps.append(c.collect(t).snapshot)
            assert gc.isenabled()
        encodings.append(set(seen))
    assert encodings == [{""}, {"gzip"}]
    assert_same(snaps[0], snaps[1])


def test_gc_pause_nests_and_restores() -> None:
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()  # was off before: stays off
    finally:
        gc.enable()
