"""Counter increases from memory never turn missing telemetry into errors, and rates never inflate.

Against a real Prometheus (lookback 1m) holding a hand-written fleet, 30 s scrapes:
- GPU-0: flat lifetime totals SBE 500 and PCIe 2000 (no new error); its error-counter series are
  missing from 330 s to 450 s (longer than the lookback) while the GPU keeps reporting;
- GPU-1..4: PCIe replays at a steady 4/min (a quarter of gpu_interconnect's 16/min budget);
- GPU-5: appears at 1500 s with a DBE total of 1 (its earlier history is unknown);
- GPU-0 also shows XID 48 (its last code) with dcgm-exporter's XID count at 2 throughout.
The partial answer and the outage go through a local HTTP proxy (tests/http_proxy.py).
Plus unit checks of the memory's rules for absent sparse totals.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from detectors.registry import bind
from errors import GpufleetError
from observer.fleet.model import FleetSnapshot
from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.counter_memory import CounterMemory
from observer.prometheus.plan import SPARSE_COUNTERS, PromSettings
from tests.http_proxy import FaultyProxy
from tests.prometheus_fixture import PrometheusHandle, start_prometheus

T0 = 1_700_000_010.0  # on the 30 s grid
END = 2400
FB = "DCGM_FI_DEV_FB_USED"
DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
SBE = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"
PCIE = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
GAP = range(330, 451)  # GPU-0's error series are missing at these sample times
STEADY = (1, 2, 3, 4)
PER_MIN = 4.0
NEW_GPU, NEW_AT = 5, 1500
NOTHING = "(?!)"  # a pattern that matches no URL
XID = "DCGM_FI_DEV_XID_ERRORS"
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"


def _labels(gpu: int) -> str:
    return f'UUID="GPU-{gpu}",gpu="{gpu}",modelName="H100",Hostname="n0",pod="p",namespace="ns"'


def _value(family: str, gpu: int, s: int) -> float | None:
    if gpu == NEW_GPU and s < NEW_AT:
        return None
    if family == FB:
        return 1000.0
    if gpu == 0:
        if s in GAP:
            return None
        return {SBE: 500.0, PCIE: 2000.0, DBE: 0.0}[family]
    if gpu == NEW_GPU:
        return 1.0 if family == DBE else 0.0
    return 100.0 + PER_MIN / 2 * (s // 30) if family == PCIE else 0.0


def write_fleet(path: Path) -> Path:
    lines: list[str] = []
    for family in (FB, DBE, SBE, PCIE):
        lines.append(f"# TYPE {family} gauge")
        for gpu in range(6):
            for s in range(0, END + 1, 30):
                v = _value(family, gpu, s)
                if v is not None:
                    lines.append(f"{family}{{{_labels(gpu)}}} {v} {T0 + s:.0f}")
    lines += [f"# TYPE {XID} gauge", f"# TYPE {XID_COUNT} gauge"]
    for s in range(0, END + 1, 30):
        for gpu in range(5):
            lines.append(f"{XID}{{{_labels(gpu)}}} {48 if gpu == 0 else 0} {T0 + s:.0f}")
        lines.append(f'{XID_COUNT}{{{_labels(0)},xid="48"}} 2 {T0 + s:.0f}')
    path.write_text("\n".join([*lines, "# EOF"]) + "\n")
    return path


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusHandle]:
    tmp = tmp_path_factory.mktemp("gaps")
    handle = start_prometheus(write_fleet(tmp / "fleet.om"), tmp, "1m")
    yield handle
    handle.stop()


def inc(snap: FleetSnapshot, family: str, gpu: int) -> float:
    col = snap.metrics[family]
    assert col.increase is not None
    return float(col.increase[snap.gpus.position(f"GPU-{gpu}")])


def per_min(snap: FleetSnapshot, family: str, gpu: int) -> float:
    return float(snap.metrics[family].rate()[snap.gpus.position(f"GPU-{gpu}")]) * 60.0


@pytest.mark.prometheus
def test_gap_in_error_series_is_no_increase(prom: PrometheusHandle) -> None:
    """GPU-0's SBE/PCIe series vanish for longer than the lookback and come back unchanged:
    absent from the sparse answer is not a reset, so no increase, live or replayed."""
    seconds = range(150, 781, 30)
    with PrometheusCollector(PromSettings(prom.url)) as c:
        live = [c.collect(T0 + s).snapshot for s in seconds]
    with PrometheusCollector(PromSettings(prom.url, range_chunk=300.0)) as c:
        replay = [r.snapshot for r in c.collect_range(T0 + 150, T0 + 780, 30)]
    assert len(replay) == len(live)
    for snap in live + replay:
        for family in (SBE, PCIE):
            assert inc(snap, family, 0) == 0.0, (family, snap.taken_at - T0)


def _partial(body: bytes, flavour: str) -> bytes:
    """An answer as a Thanos querier with one store down gives it (`warnings`), or a
    VictoriaMetrics cluster with one vmstorage down (`isPartial`): GPU-0's series missing."""
    data = json.loads(body)
    rows = data["data"]["result"]
    data["data"]["result"] = [r for r in rows if r["metric"].get("UUID") != "GPU-0"]
    if flavour == "thanos":
        data["warnings"] = ["partial response: store 10.0.0.7:10901 unavailable"]
    else:
        data["isPartial"] = True
    return json.dumps(data).encode()


@pytest.mark.prometheus
@pytest.mark.parametrize("flavour", ["thanos", "victoriametrics"])
def test_partial_sparse_answer_is_no_increase(prom: PrometheusHandle, flavour: str) -> None:
    """A partial sparse answer counts as failed: no zero-fill, no memory update; the cycles
    after it see GPU-0's unchanged totals as no increase."""
    partial_at = 990
    with FaultyProxy(prom.url) as proxy:
        on = {"now": False}
        sparse = f'pod) ({{__name__=~"{SPARSE_COUNTERS[0]}|'  # the values:sparse query
        rule = proxy.rule(
            re.escape(sparse), mutate=lambda b: _partial(b, flavour) if on["now"] else b
        )
        with PrometheusCollector(PromSettings(proxy.url)) as c:
            results = []
            for s in range(900, 1261, 30):
                on["now"] = s == partial_at
                results.append((s, c.collect(T0 + s)))
    assert rule.hits >= len(results)
    for s, r in results:  # never a fake increase of the lifetime totals (500, 2000)
        if s != partial_at:
            assert not r.stats.problems, s
            assert inc(r.snapshot, SBE, 0) == 0.0 and inc(r.snapshot, PCIE, 0) == 0.0, s
    snap = dict(results)[partial_at].snapshot
    assert any("warnings" in p for p in dict(results)[partial_at].stats.problems)
    for family in (SBE, PCIE):  # the partial cycle: unknown, not 0
        assert np.isnan(inc(snap, family, 0)), family
        assert np.isnan(snap.metrics[family].value[snap.gpus.position("GPU-0")])


@pytest.mark.prometheus
def test_partial_xid_count_answer_is_no_new_xid(prom: PrometheusHandle) -> None:
    """dcgm-exporter omits zero XID counts, so reporting GPUs without one read 0; a partial
    answer missing GPU-0's count must read unknown, not 0, or its return to 2 would count as
    two new XIDs (a repeat escalation, a fresh last occurrence)."""
    partial_at = 990
    detector, state = bind("gpu_xid"), None
    seen: list[tuple[int, float, float]] = []
    with FaultyProxy(prom.url) as proxy:
        on = {"now": False}
        query = re.escape(f"{XID_COUNT} or label_replace")
        proxy.rule(query, mutate=lambda b: _partial(b, "thanos") if on["now"] else b)
        with PrometheusCollector(PromSettings(proxy.url)) as c:
            for s in range(900, 1261, 30):
                on["now"] = s == partial_at
                snap = c.collect(T0 + s).snapshot
                col = snap.metrics.get(XID_COUNT)  # no column: the count is unknown
                count = np.nan if col is None else float(col.value[snap.gpus.position("GPU-0")])
                assert np.isnan(count) if s == partial_at else count == 2.0, (s, count)
                findings, state = detector.detect(snap, state, T0 + s)
                (f,) = [f for f in findings if f.gpu_uuid == "GPU-0"]
                seen.append((s, f.evidence["occurrences"], f.evidence["last_occurrence"]))
    assert {(occ, last) for _, occ, last in seen} == {(2, T0 + 900)}, seen


@pytest.mark.prometheus
def test_partial_sparse_fetch_in_a_replay_is_no_increase(prom: PrometheusHandle) -> None:
    """The replay's raw sparse fetch of one chunk comes back partial: that chunk's steps have
    no error-counter increases (failed, degraded), and the chunks after it no fake ones."""
    with FaultyProxy(prom.url) as proxy:
        fetches = {"n": 0}

        def second_partial(body: bytes) -> bytes:
            fetches["n"] += 1
            return _partial(body, "thanos") if fetches["n"] == 2 else body

        raw = f'query={{__name__=~"{SPARSE_COUNTERS[0]}|'  # the raw:sparse selector
        proxy.rule(re.escape(raw), mutate=second_partial)
        with PrometheusCollector(PromSettings(proxy.url, range_chunk=120.0)) as c:
            results = list(c.collect_range(T0 + 900, T0 + 1500, 30))
    assert fetches["n"] >= 3
    degraded = {id(r) for r in results if any("warnings" in p for p in r.stats.problems)}
    assert degraded and len(degraded) < len(results)
    for r in results:
        snap = r.snapshot
        for family in (SBE, PCIE):
            got = inc(snap, family, 0) if family in snap.metrics else np.nan
            if id(r) in degraded:
                assert np.isnan(got), (family, snap.taken_at - T0)
            else:
                assert got == 0.0, (family, snap.taken_at - T0)


@pytest.mark.prometheus
def test_prometheus_outage_then_warm_cycles_read_true_rates(prom: PrometheusHandle) -> None:
    """Prometheus unreachable for 10 minutes, then warm cycles again: the 10 minutes of growth
    is spread over the 10 minutes it took (span), so the steady 4/min reads 4/min and
    gpu_interconnect stays quiet."""
    detector, state = bind("gpu_interconnect"), None
    seen: list[tuple[int, float]] = []
    with FaultyProxy(prom.url) as proxy:
        outage = proxy.rule(NOTHING, status=503)
        settings = PromSettings(proxy.url, retries=0)
        with PrometheusCollector(settings) as c:
            for s in range(480, 1501, 30):
                down = 690 <= s < 1290
                outage.pattern = re.compile("." if down else NOTHING)
                if down:
                    with pytest.raises(GpufleetError):
                        c.collect(T0 + s)
                    continue
                snap = c.collect(T0 + s).snapshot
                findings, state = detector.detect(snap, state, T0 + s)
                assert not findings, (s, [f.summary for f in findings])
                seen += [(s, per_min(snap, PCIE, g)) for g in STEADY]
    after = [pm for s, pm in seen if s >= 1290]
    assert after and all(abs(pm - PER_MIN) < 0.05 * PER_MIN for pm in after), seen


@pytest.mark.prometheus
def test_cycles_and_replay_steps_300_s_apart_read_the_true_rate(prom: PrometheusHandle) -> None:
    times = [T0 + 150 + 300 * k for k in range(5)]
    with PrometheusCollector(PromSettings(prom.url)) as c:
        warm = [c.collect(t).snapshot for t in times]
    with PrometheusCollector(PromSettings(prom.url)) as c:
        replay = [r.snapshot for r in c.collect_range(times[0], times[-1], 300)]
    assert len(replay) == len(warm)
    for a, b in zip(warm, replay, strict=True):
        for g in STEADY:
            assert abs(per_min(a, PCIE, g) - PER_MIN) < 0.05 * PER_MIN, (a.taken_at - T0, g)
            assert per_min(b, PCIE, g) == pytest.approx(per_min(a, PCIE, g), rel=1e-9)
    for a, b in zip(warm[1:], replay[1:], strict=True):  # 300 s of growth over 300 s
        span_a, span_b = a.metrics[PCIE].span, b.metrics[PCIE].span
        assert span_a is not None and span_b is not None
        np.testing.assert_allclose(span_b, span_a, rtol=1e-9)
        assert span_a[a.gpus.position("GPU-1")] == 300.0


@pytest.mark.prometheus
def test_cold_start_window_rate_is_not_inflated(prom: PrometheusHandle) -> None:
    """The cold start's seed (Prometheus' increase over the window before it) stays in the
    window one more window: its span grows with it, so the rate stays true."""
    with PrometheusCollector(PromSettings(prom.url)) as c:
        snaps = [c.collect(T0 + s).snapshot for s in range(600, 871, 30)]
    for snap in snaps:
        for g in STEADY:
            assert abs(per_min(snap, PCIE, g) - PER_MIN) < 0.05 * PER_MIN, snap.taken_at - T0


@pytest.mark.prometheus
def test_new_gpu_first_nonzero_total_is_unknown(prom: PrometheusHandle) -> None:
    """GPU-5 first shows up with a DBE total of 1: how much of it is recent is unknown (NaN),
    not 0; its flat total afterwards is 0. Replayed steps say the same."""
    seconds = range(NEW_AT - 60, NEW_AT + 91, 30)
    with PrometheusCollector(PromSettings(prom.url)) as c:
        live = [c.collect(T0 + s).snapshot for s in seconds]
    with PrometheusCollector(PromSettings(prom.url)) as c:
        replay = [r.snapshot for r in c.collect_range(T0 + seconds[0], T0 + seconds[-1], 30)]
    for snaps in (live, replay):
        got = {
            int(s.taken_at - T0): inc(s, DBE, NEW_GPU)
            for s in snaps
            if "GPU-5" in s.gpus.uuid.tolist()
        }
        assert np.isnan(got[NEW_AT]), got
        assert all(v == 0.0 for s, v in got.items() if s > NEW_AT), got
        assert all(inc(s, DBE, 1) == 0.0 for s in snaps)  # a first total of 0 is 0


def test_memory_absent_sparse_totals() -> None:
    """Absent from a complete sparse answer: learned as 0 only when unknown; a known total > 0 is
    kept (no reset); on reappearance v - old, or v when lower (the restart rule)."""
    m = CounterMemory(("c",), window=120.0, keep=900.0)
    keys = ["a", "b", "c"]
    nan = np.nan
    m.seed(keys, np.array([[7.0, nan, nan]]), np.zeros(3), 0.0, np.full((1, 3), nan),
           absent=np.array([[False, True, False]]))  # fmt: skip
    cols = m.columns(keys)
    steps = [  # t, totals, absent, expected increases
        (30.0, [nan, nan, 3.0], [True, True, False], [0.0, 0.0, nan]),  # a held; c: first 3
        (60.0, [nan, 1.0, 3.0], [True, False, False], [0.0, 1.0, 0.0]),  # b: 0 -> 1
        (90.0, [7.0, 1.0, nan], [False, False, True], [0.0, 1.0, 0.0]),  # a back unchanged
        (120.0, [nan, nan, 2.0], [True, True, False], [0.0, 1.0, 2.0]),  # c restarted: 2
        (150.0, [9.0, nan, nan], [False, True, True], [2.0, 1.0, 2.0]),  # a: 7 -> 9
    ]
    for t, totals, absent, want in steps:
        got, span = m.observe(cols, np.array([totals]), np.full(3, t), t, np.array([absent]))
        np.testing.assert_array_equal(got[0], want, err_msg=str(t))
        assert (span >= 120.0).all()
    assert m.total[0, cols].tolist() == [9.0, 1.0, 2.0]  # absence never overwrote a total
    # a held total's growth spans the whole gap; held longer than `keep`, it is unknown again
    absent_a = np.array([[True, False, False]])
    _, span = m.observe(cols, np.full((1, 3), nan), np.full(3, 700.0), 700.0, absent_a)
    got, span = m.observe(cols, np.array([[10.0, nan, nan]]), np.full(3, 730.0), 730.0, ~absent_a)
    assert got[0, 0] == 1.0 and span[0, 0] == 730.0 - 150.0
    _, _ = m.observe(cols, np.full((1, 3), nan), np.full(3, 1700.0), 1700.0, absent_a)
    got, _ = m.observe(cols, np.array([[12.0, nan, nan]]), np.full(3, 1730.0), 1730.0, ~absent_a)
    assert np.isnan(got[0, 0])  # unknown: never a fake increase of 12
