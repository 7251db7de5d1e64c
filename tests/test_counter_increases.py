"""Counter increases on warm cycles come from the collector's memory of totals
(observer.prometheus.counter_memory), against a real Prometheus holding a hand-written fleet of 4
GPUs:

- GPU-0: 2 DBEs between the samples at 270 s and 300 s;
- GPU-1: its PCIe replay counter restarts (5 -> 0) at 360 s, without any new error;
- GPU-2: NVLink bandwidth +1000 per 30 s scrape, its pod replaced at 600 s (the old pod's
  series linger in backfilled data, the new pod's series continue the device's total);
- GPU-3: 1 DBE between the samples at 420 s and 450 s.
Plus unit checks of the memory itself (no Prometheus).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from observer.fleet.model import FleetSnapshot
from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.memory import CounterMemory
from observer.prometheus.plan import PromSettings
from tests.prometheus_fixture import PrometheusHandle, start_prometheus

T0 = 1_700_000_010.0  # on the 30 s grid
END = 900
DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
PCIE = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
SBE = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"


def _labels(gpu: int, pod: str) -> str:
    return (f'UUID="GPU-{gpu}",gpu="{gpu}",modelName="H100",Hostname="n0",'
            f'pod="{pod}",namespace="ns"')  # fmt: skip


def _pod(gpu: int, s: int) -> str:
    return "train-b" if gpu == 2 and s >= 600 else "train-a"


def _totals(gpu: int, s: int) -> dict[str, float]:
    return {
        "DCGM_FI_DEV_FB_USED": 1000.0 + gpu,
        DBE: (2.0 if gpu == 0 and s >= 300 else 0.0) + (1.0 if gpu == 3 and s >= 450 else 0.0),
        PCIE: 5.0 if gpu == 1 and s < 360 else 0.0,
        SBE: 1000.0 * (s // 30) if gpu == 2 else 7.0,
    }


def write_fleet(path: Path) -> Path:
    lines: list[str] = []
    for family in ("DCGM_FI_DEV_FB_USED", DBE, PCIE, SBE):
        lines.append(f"# TYPE {family} gauge")
        for gpu in range(4):
            for pod in ("train-a", "train-b") if gpu == 2 else ("train-a",):
                for s in range(0, END + 1, 30):
                    if _pod(gpu, s) == pod:
                        v = _totals(gpu, s)[family]
                        lines.append(f"{family}{{{_labels(gpu, pod)}}} {v} {T0 + s:.0f}")
    path.write_text("\n".join([*lines, "# EOF"]) + "\n")
    return path


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusHandle]:
    tmp = tmp_path_factory.mktemp("counters")
    handle = start_prometheus(write_fleet(tmp / "fleet.om"), tmp)
    yield handle
    handle.stop()


def inc(snap: FleetSnapshot, family: str, gpu: int) -> float:
    col = snap.metrics[family]
    assert col.increase is not None and col.window_seconds == 120.0
    return float(col.increase[snap.gpus.position(f"GPU-{gpu}")])


@pytest.mark.prometheus
def test_warm_cycles_report_each_increment_for_one_window(prom: PrometheusHandle) -> None:
    seconds = list(range(150, 781, 30))
    with PrometheusCollector(PromSettings(prom.url)) as c:
        results = [c.collect(T0 + s) for s in seconds]
    assert [r.stats.query_count for r in results] == [23] + [14] * (len(seconds) - 1)
    assert not any(r.stats.problems for r in results)
    for s, r in zip(seconds, results, strict=True):
        snap = r.snapshot
        assert inc(snap, DBE, 0) == (2.0 if 300 <= s < 420 else 0.0), s
        assert inc(snap, PCIE, 1) == 0.0, s  # the restart is no error
        assert inc(snap, DBE, 3) == (1.0 if 450 <= s < 570 else 0.0), s
        assert all(inc(snap, f, g) == 0.0 for f in (DBE, PCIE) for g in (1, 2)), s
        if s >= 300:  # the cold start's seed (Prometheus' increase) has left the window
            assert inc(snap, SBE, 2) == 4000.0, s  # across the pod switch at 600 s
            assert inc(snap, SBE, 0) == 0.0, s
    switched = results[seconds.index(630)]
    assert switched.report.duplicate_identity_rows, "the old pod's series should linger"


@pytest.mark.prometheus
def test_cycles_further_apart_than_the_window(prom: PrometheusHandle) -> None:
    """5-minute cycles with a 2-minute window: the increment at 450 s is reported once, by the
    cycle at 600 s, where Prometheus' `increase(x[2m])` (a cold cycle) no longer sees it."""
    with PrometheusCollector(PromSettings(prom.url)) as c:
        got = [inc(c.collect(T0 + s).snapshot, DBE, 3) for s in (240, 600, 900)]
    assert got == [0.0, 1.0, 0.0]
    with PrometheusCollector(PromSettings(prom.url)) as cold:
        assert inc(cold.collect(T0 + 600).snapshot, DBE, 3) == 0.0


@pytest.mark.prometheus
def test_range_replay_steps_equal_warm_cycles(prom: PrometheusHandle) -> None:
    settings = PromSettings(prom.url, range_chunk=90.0)  # 4 steps per chunk
    with PrometheusCollector(settings) as c:
        replay = [r.snapshot for r in c.collect_range(T0 + 150, T0 + 780, 30)]
    with PrometheusCollector(settings) as c:
        instant = [c.collect(s.taken_at).snapshot for s in replay]
    for a, b in zip(replay, instant, strict=True):
        for family in (DBE, PCIE, SBE):
            got, want = a.metrics[family].increase, b.metrics[family].increase
            assert got is not None and want is not None
            np.testing.assert_allclose(got, want, rtol=1e-9, err_msg=f"{family} {a.taken_at}")


def memory() -> CounterMemory:
    return CounterMemory(("c",), window=120.0, keep=900.0)


def test_memory_deltas_resets_and_window() -> None:
    m = memory()
    keys = ["a", "b"]
    m.seed(keys, np.array([[10.0, 5.0]]), np.array([0.0, 0.0]), 0.0, np.array([[3.0, np.nan]]))
    cols = m.columns(keys)
    steps = [  # t, totals, stamps, expected increases, expected spans
        (30.0, [12.0, 5.0], [30.0, 30.0], [5.0, 0.0], [150.0, 120.0]),  # seed 3 (-120..0) + 2
        (60.0, [12.0, 1.0], [60.0, 60.0], [5.0, 1.0], [150.0, 120.0]),  # b restarted: 1 since
        (90.0, [99.0, 1.0], [60.0, 90.0], [5.0, 1.0], [150.0, 120.0]),  # a did not advance
        (120.0, [12.0, 1.0], [120.0, 120.0], [2.0, 1.0], [120.0, 120.0]),  # the seed left
        (400.0, [20.0, np.nan], [400.0, np.nan], [8.0, np.nan], [280.0, 120.0]),  # 120..400
        (1400.0, [25.0, 1.0], [1400.0, 1400.0], [np.nan, np.nan], [120.0, 120.0]),  # forgotten
        (1430.0, [26.0, 1.0], [1430.0, 1430.0], [1.0, 0.0], [120.0, 120.0]),
    ]
    for t, totals, stamps, want, want_span in steps:
        got, span = m.observe(cols, np.array([totals]), np.array(stamps), t)
        np.testing.assert_array_equal(got[0], want, err_msg=str(t))
        np.testing.assert_array_equal(span[0], want_span, err_msg=str(t))
    assert m.log_delta.tolist() == [1.0]  # only non-zero deltas of the last window are kept


def test_memory_new_gpus_and_compaction() -> None:
    m = memory()
    m.seed([], np.empty((1, 0)), np.empty(0), 0.0, np.empty((1, 0)))
    old = [f"old-{i}" for i in range(2000)]
    m.observe(m.columns(old), np.ones((1, 2000)), np.zeros(2000), 0.0)
    new = ["n"]
    got, _ = m.observe(m.columns(new), np.array([[4.0]]), np.array([1000.0]), 1000.0)
    assert np.isnan(got[0, 0])  # a GPU's first total: no increase yet
    m.compact(1000.0)
    assert list(m.index) == ["n"] and m.total.shape[1] == 64
    got, _ = m.observe(m.columns(new), np.array([[6.0]]), np.array([1030.0]), 1030.0)
    assert got[0, 0] == 2.0
    assert m.warm(1030.0) and not m.warm(1000.0) and not m.warm(1030.0 + 901)
