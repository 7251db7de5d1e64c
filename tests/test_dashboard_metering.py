"""Fleet, Jobs and Utilization & cost under AppTest, on metering's tables written by the real
Meter for 10k GPUs (and on an empty store)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import metering
from dashboards import data
from harness.dashboard_seed import FLEET_JOB, seed_fleet, seed_straggler, write_settings
from remediations.store import Store
from tests.test_dashboard_pages import app, texts

JOB = FLEET_JOB


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    data.changed()
    data.store.clear()
    yield
    data.store.clear()


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """10k GPUs in four pools, four cycles five minutes apart (one store for the module)."""
    tmp = tmp_path_factory.mktemp("big")
    url = f"sqlite:///{tmp / 'journal.db'}"
    store = Store.open(url, cluster="alpha")
    seed_fleet(store, 10_000)
    seed_straggler(store)
    store.close()
    return url, write_settings(tmp / "s.json", url, "alpha")


def test_metering_pages_on_an_empty_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    Store.open(url, cluster="alpha").close()
    settings = write_settings(tmp_path / "s.json", url, "alpha")
    assert "No fleet state recorded yet" in texts(app(settings, "page_files/fleet.py"))
    assert "No job holds GPUs" in texts(app(settings, "page_files/jobs.py"))
    assert "No usage recorded" in texts(app(settings, "page_files/utilization.py"))


def test_fleet_page_at_10k_gpus(big: tuple[str, Path]) -> None:
    _, settings = big
    at = app(settings, "page_files/fleet.py")
    kpi = {m.label: m.value for m in at.metric}
    # The benchmark fleet has one silent node (its exporter stopped answering): its 8 GPUs are
    # unmeasured (no_data), never counted healthy from the exporter's last page.
    assert kpi["GPUs"] == "10,000" and kpi["Healthy"] == "9,992"
    pools = at.dataframe[0].value
    assert list(pools["pool"]) == ["pool-0", "pool-1", "pool-2", "pool-3"]
    assert int(pools["gpus"].sum()) == 10_000 and int(pools["no_data"].sum()) == 8
    at.selectbox(key="fleet_pool").set_value("pool-2").run()
    at.radio(key="fleet_col").set_value("utilization").run()
    assert not at.exception


def test_utilization_reconciles_with_metering(big: tuple[str, Path]) -> None:
    url, settings = big
    at = app(settings, "page_files/utilization.py")
    at.selectbox(key="util_by").set_value("Team").run()
    table = at.dataframe[0].value
    store = Store.open(url, cluster="alpha")
    try:
        lo, hi = data.now() - 86400 * 8, data.now()
        want = metering.totals(metering.usage(store, lo, hi, "team"), metering.MeteringConfig())
    finally:
        store.close()
    assert table["allocated_gpu_hours"].sum() == pytest.approx(want.allocated_gpu_hours)
    assert table["busy_gpu_hours"].sum() == pytest.approx(want.busy_gpu_hours)
    assert table["idle_gpu_hours"].sum() == pytest.approx(want.idle_gpu_hours)
    assert set(table["key"]) == {f"team-{i}" for i in range(5)}
    csv = at.get("download_button")[0]
    assert csv is not None


def test_jobs_page_shows_ranks(big: tuple[str, Path]) -> None:
    _, settings = big
    at = app(settings, "page_files/jobs.py")
    assert at.toggle(key="jobs_bad").value is True  # a job is in trouble: only those shown
    assert at.selectbox(key="jobs_pick").value == JOB
    assert any("paces job team-0/job-0000" in e.value for e in at.error)
    ranks = at.dataframe[1].value
    assert len(ranks) == 128
    assert list(ranks[ranks["flag"] == "straggler"]["node"]) == ["gpu-node-00002"]
    at.toggle(key="jobs_bad").set_value(False).run()
    assert len(at.dataframe[0].value) == 62
