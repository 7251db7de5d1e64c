"""The daily report and the `metering:` config section, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from errors import ConfigError
from gpufleet.config import load_config
from metering import (
    ALL_CLUSTERS,
    DailyReport,
    Meter,
    MeteringConfig,
    daily_job,
    daily_report,
    last_midnight,
    metering_config_from_section,
    reports,
    totals,
    usage,
)
from remediations.store import IncidentRecord, NewAction, Store
from remediations.types import ActionState, IncidentId, IncidentStatus, Intent, Mode, Verdict
from tests.metering.support import H100, T0, fleet, snapshot

DAY = 86400.0
PRICES = MeteringConfig(prices={H100: 3.0}, currency="EUR")


def _incident(i: int, at: float, severity: str = "critical") -> IncidentRecord:
    return IncidentRecord(
        id=IncidentId(f"inc{i}"),
        cluster="test-cluster",
        kind="gpu_xid",
        entity_key=f"gpu_xid|node-00{i}",
        node=f"node-00{i}",
        gpu_uuid=None,
        job=None,
        status=IncidentStatus.OPEN,
        severity=severity,
        summary=f"XID on node-00{i}",
        opened_at=at,
        updated_at=at,
        resolved_at=None,
        first_seen=at,
        last_seen=at,
        seen_cycles=1,
        healthy_cycles=0,
    )


def _action(key: str) -> NewAction:
    return NewAction(
        idempotency_key=key,
        incident_id=IncidentId("inc1"),
        playbook="cordon",
        target="node/node-001",
        target_nodes=("node-001",),
        disruptive=True,
        mode=Mode.AUTO,
        rule="r",
        state=ActionState.APPROVED,
        decision=Verdict.EXECUTE,
        reasons=("ok",),
        params={},
        plan=(Intent("cordon", "node-001"),),
        shadow=False,
        attempt=1,
    )


def test_daily_report_numbers_incidents_actions(store: Store) -> None:
    f = fleet()
    meter = Meter(store, PRICES)
    for k in range(0, 3601, 30):  # one hour of cycles, 30 s apart
        meter.record_cycle(snapshot(f, T0 + k))
    store.save_incidents([_incident(1, T0 + 60), _incident(2, T0 - DAY, "warning")])
    store.propose(_action("a1"), now=T0 + 100)
    store.propose(_action("yesterday"), now=T0 - 3600)

    report = daily_report(store, end=T0 + DAY, config=PRICES, now=T0 + DAY + 5)
    assert (report.start, report.end, report.currency) == (int(T0), int(T0 + DAY), "EUR")
    ns = {line.namespace: line for line in report.namespaces}
    assert ns["ml"].allocated_gpu_hours == pytest.approx(4.0)
    assert ns["ml"].busy_gpu_hours == pytest.approx(2.0) and ns["ml"].busy_percent == 50.0
    assert ns["ml"].idle_gpu_hours == pytest.approx(2.0) and ns["ml"].idle_cost == 6.0
    assert ns["web"].idle_gpu_hours == pytest.approx(0.0)
    assert report.namespaces[0].namespace == "ml"  # the most idle first
    assert report.totals.gpu_hours == pytest.approx(12.0)
    assert report.totals.idle_cost == pytest.approx(6.0)
    assert report.incidents_opened == 1 and report.incidents_by_kind == {"gpu_xid": 1}
    assert report.incidents[0].id == "inc1"
    assert report.actions_by_playbook == {"cordon": {"approved": 1}}
    # the report agrees with the rollups the dashboard reads
    same = totals(usage(store, T0, T0 + DAY, by="namespace"), PRICES)
    assert same.idle_gpu_hours == pytest.approx(report.totals.idle_gpu_hours)

    (saved,) = reports(store)
    assert saved == report
    again = daily_report(store, end=T0 + DAY, config=PRICES, now=T0 + DAY + 60)
    (saved,) = reports(store)  # the same day written again replaces it
    assert saved == again and saved.created_at == T0 + DAY + 60
    assert DailyReport.from_json(again.to_json()) == again
    assert reports(store, cluster="elsewhere") == [] and reports(store, cluster=ALL_CLUSTERS)


def test_unpriced_models_are_counted_apart(store: Store) -> None:
    f = fleet()
    meter = Meter(store)
    meter.record_cycle(snapshot(f, T0))
    meter.record_cycle(snapshot(f, T0 + 3600))  # capped by max_gap_seconds: 300 s
    report = daily_report(store, end=T0 + DAY, save=False)
    assert report.totals.idle_cost == 0.0
    assert report.totals.unpriced_idle_gpu_hours == pytest.approx(4 * 300 * 0.5 / 3600)
    assert reports(store) == []
    fallback = MeteringConfig(default_price=1.5)
    assert fallback.price_for(H100) == 1.5 and PRICES.price_for("other") is None


def test_config_errors_name_the_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "gpufleet.yaml"
    path.write_text(
        "metering:\n  retention_days: -1\n  prices: {A100: cheap}\n  tean_label: x\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = err.value.render()
    assert f"{path}: metering.retention_days: expected input should be greater than 0" in text
    assert f"{path}: metering.prices.A100: expected input should be a valid number" in text
    assert f"{path}: metering.tean_label: unknown field (check its spelling)" in text
    path.write_text("metering:\n  prices: {A100: 1.2}\n  team_label: owner\n", encoding="utf-8")
    cfg, _ = load_config(path)
    assert cfg.metering.price_for("A100") == 1.2 and cfg.metering.team_label == "owner"
    with pytest.raises(ConfigError, match=r"x.yaml: metering: expected a mapping, got list"):
        metering_config_from_section([1], "x.yaml")
    with pytest.raises(ConfigError, match=r"x.yaml: metering.max_gap_seconds: expected"):
        metering_config_from_section({"max_gap_seconds": 0}, "x.yaml")
    assert metering_config_from_section(None) == MeteringConfig()


def test_daily_job_reports_the_day_that_ended_and_prunes(store: Store) -> None:
    f = fleet()
    meter = Meter(store, PRICES)
    meter.record_cycle(snapshot(f, T0 + 600))
    meter.record_cycle(snapshot(f, T0 + 630))
    # 2026-01-02 09:00 in Berlin (08:00 UTC): the day that ended at Berlin's midnight
    now = T0 + DAY + 8 * 3600
    assert last_midnight(now) == T0 + DAY
    assert last_midnight(now, "Europe/Berlin") == T0 + DAY - 3600
    report = daily_job(store, PRICES, now=now, tz="Europe/Berlin")
    assert (report.start, report.end) == (int(T0 - 3600), int(T0 + DAY - 3600))
    assert report.totals.gpu_hours == pytest.approx(12 * 30 / 3600)
    assert [r.end for r in reports(store)] == [report.end]
    old = MeteringConfig(retention_days=1, hourly_retention_days=1, report_retention_days=1)
    daily_job(store, old, now=now + 3 * DAY)
    assert [r.end for r in reports(store)] == [int(T0 + 4 * DAY)]  # the old one pruned
    assert usage(store, T0, T0 + DAY, by="fleet") == []
