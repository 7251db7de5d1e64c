"""Metering on SQLite and PostgreSQL: schema, state, rollups, gaps, failover, clusters, prune."""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy import inspect

from database.tables import metering as t
from detectors.findings import Finding, FindingKind, Severity
from metering import (
    ALL_CLUSTERS,
    Health,
    Meter,
    MeteringConfig,
    Usage,
    fleet_state,
    last_cycle,
    prune,
    usage,
)
from observer.fleet.model import FleetSnapshot
from remediations.store import Store
from tests.fleet import Fleet
from tests.metering.support import (
    T0,
    as_mig,
    fleet,
    quarantine,
    snapshot,
    with_pools,
    without_util,
)

H = 3600.0


def by_key(rows: list[Usage]) -> dict[str, tuple[float, ...]]:
    out: dict[str, tuple[float, float, float, float]] = {}
    for r in rows:
        g, a, b, u = out.get(r.key, (0.0, 0.0, 0.0, 0.0))
        out[r.key] = (
            g + r.gpu_hours * H,
            a + r.allocated_gpu_hours * H,
            b + r.busy_gpu_hours * H,
            u + r.unmeasured_gpu_hours * H,
        )
    return {k: tuple(round(x, 6) for x in v) for k, v in out.items()}


def test_state_and_usage_of_two_cycles(store: Store) -> None:
    f = fleet()
    meter = Meter(store)
    first = meter.record_cycle(snapshot(f, T0))
    assert first.accounted_seconds == 0.0 and first.usage_rows == 0  # nothing before it
    second = meter.record_cycle(snapshot(f, T0 + 30))
    assert second.accounted_seconds == 30.0 and last_cycle(store) == T0 + 30
    state = fleet_state(store)
    assert len(state) == 12 and {s.taken_at for s in state} == {T0 + 30}
    g0 = state[0]
    assert (g0.node, g0.device, g0.namespace, g0.job, g0.team, g0.allocated) == (
        "node-000",
        0,
        "ml",
        "ml/train",
        "research",
        True,
    )
    assert g0.pod == "train-worker-0" and g0.utilization == 50.0 and g0.health == Health.HEALTHY
    free = state[8]
    assert not free.allocated and free.namespace == "" and free.job == "" and free.pod == ""
    # 4 GPUs x 30 s per node; busy is utilization-weighted
    assert by_key(usage(store, T0, T0 + 300, by="namespace")) == {
        "ml": (120.0, 120.0, 60.0, 0.0),
        "web": (120.0, 120.0, 120.0, 0.0),
    }
    assert by_key(usage(store, T0, T0 + 300, by="team")) == {
        "research": (120.0, 120.0, 60.0, 0.0),
        "product": (120.0, 120.0, 120.0, 0.0),
    }
    assert by_key(usage(store, T0, T0 + 300, by="job")) == {
        "ml/train": (120.0, 120.0, 60.0, 0.0),
        "": (120.0, 120.0, 120.0, 0.0),  # web/api-0 belongs to no job
    }
    assert by_key(usage(store, T0, T0 + 300, by="node"))["node-002"] == (120.0, 0.0, 0.0, 0.0)
    assert by_key(usage(store, T0, T0 + 300, by="fleet")) == {"": (360.0, 240.0, 180.0, 0.0)}
    (row,) = usage(store, T0, T0 + 300, by="fleet")
    assert row.model == "NVIDIA H100 80GB HBM3" and row.idle_gpu_hours == pytest.approx(60 / H)


def test_intervals_split_at_bucket_boundaries(store: Store) -> None:
    f = fleet()
    meter = Meter(store)
    meter.record_cycle(snapshot(f, T0 + 290))
    meter.record_cycle(snapshot(f, T0 + 320))
    rows = usage(store, T0, T0 + 600, by="fleet", per_bucket=True)
    assert [(r.bucket, round(r.gpu_hours * H, 6)) for r in rows] == [
        (int(T0), 10 * 12.0),
        (int(T0) + 300, 20 * 12.0),
    ]
    # a window is cut on bucket boundaries: [T0+300, T0+600) holds the second bucket only
    assert by_key(usage(store, T0 + 300, T0 + 600, by="fleet")) == {"": (240.0, 160.0, 120.0, 0.0)}


def test_gaps_replays_and_a_new_leader(store: Store) -> None:
    f = fleet()
    cfg = MeteringConfig(max_gap_seconds=120)
    Meter(store, cfg).record_cycle(snapshot(f, T0))
    gap = Meter(store, cfg).record_cycle(snapshot(f, T0 + 3600))  # the service was down 1 h
    assert gap.accounted_seconds == 120.0
    again = Meter(store, cfg).record_cycle(snapshot(f, T0 + 3600))  # replayed cycle
    older = Meter(store, cfg).record_cycle(snapshot(f, T0 + 1800))  # a late, older cycle
    assert again.accounted_seconds == 0.0 and older.accounted_seconds == 0.0
    assert last_cycle(store) == T0 + 3600
    # a standby taking over continues from the cursor in the database, not from zero
    took_over = Meter(Store(store.engine, store.cluster), cfg).record_cycle(snapshot(f, T0 + 3630))
    assert took_over.accounted_seconds == 30.0
    assert by_key(usage(store, T0, T0 + 7200, by="fleet")) == {
        "": (12 * 150.0, 8 * 150.0, 6 * 150.0, 0.0)
    }


def test_health_and_missing_utilization(store: Store) -> None:
    f = fleet()
    snap = quarantine(without_util(snapshot(f, T0 + 30), gpu=0), node=2)
    xid = Finding(
        FindingKind.GPU_XID,
        Severity.CRITICAL,
        "XID 79",
        T0,
        T0 + 30,
        node="node-001",
        gpu_uuid="GPU-001-2",
    )
    idle = Finding(FindingKind.GPU_IDLE, Severity.WARNING, "idle", T0, T0, gpu_uuid="GPU-001-3")
    meter = Meter(store)
    meter.record_cycle(snapshot(f, T0))
    meter.record_cycle(snap, findings=[xid, idle])
    state = {s.uuid: s for s in fleet_state(store)}
    assert state["GPU-000-0"].health == Health.NO_DATA and state["GPU-000-0"].utilization is None
    assert state["GPU-001-2"].health == Health.DEGRADED and state["GPU-001-2"].issue == "gpu_xid"
    assert state["GPU-001-3"].health == Health.HEALTHY  # idleness is not a health problem
    assert {state[f"GPU-002-{d}"].health for d in range(4)} == {Health.QUARANTINED}
    # GPU 0 had no sample: allocated, neither busy nor idle
    (ml,) = usage(store, T0, T0 + 300, by="namespace")[:1]
    assert ml.key == "ml"
    assert ml.unmeasured_gpu_hours * H == pytest.approx(30.0)
    assert ml.busy_gpu_hours * H == pytest.approx(3 * 30 * 0.5)
    assert ml.idle_gpu_hours * H == pytest.approx(3 * 30 * 0.5)


def test_clusters_share_one_database(store_url: str) -> None:
    one, two = Store.open(store_url, "one"), Store.open(store_url, "two")
    try:
        f = fleet()
        for s in (one, two):
            Meter(s).record_cycle(snapshot(f, T0))
            Meter(s).record_cycle(snapshot(f, T0 + 60))
        assert len(fleet_state(one)) == 12 and len(fleet_state(one, ALL_CLUSTERS)) == 24
        assert {r.cluster for r in usage(one, T0, T0 + 300, "fleet", cluster=ALL_CLUSTERS)} == {
            "one",
            "two",
        }
        assert by_key(usage(two, T0, T0 + 300, by="fleet")) == {"": (720.0, 480.0, 360.0, 0.0)}
    finally:
        one.close()
        two.close()


def test_prune_keeps_the_retention_window(store: Store) -> None:
    f = fleet()
    meter = Meter(store, MeteringConfig(max_gap_seconds=86400))
    day = 86400.0
    for k in range(4):
        meter.record_cycle(snapshot(f, T0 + k * day))
    assert len(usage(store, T0, T0 + 4 * day, "fleet", per_bucket=True)) == 3 * 288
    cfg = MeteringConfig(retention_days=1)
    pruned = prune(store, now=T0 + 3 * day, config=cfg)
    assert pruned.usage_rows > 0
    left = usage(store, T0, T0 + 4 * day, "fleet", per_bucket=True)
    assert min(r.bucket or 0 for r in left) >= T0 + 2 * day - 300
    assert len(left) == 289  # the bucket that ends at the cutoff, and the last day
    assert pruned.hourly_rows == 0  # hourly rollups are kept longer
    hours = usage(store, T0, T0 + 4 * day, "fleet", per_bucket=True, resolution=3600)
    assert len(hours) == 3 * 24
    pruned = prune(store, T0 + 3 * day, MeteringConfig(retention_days=1, hourly_retention_days=1))
    assert pruned.hourly_rows > 0
    hours = usage(store, T0, T0 + 4 * day, "fleet", per_bucket=True, resolution=3600)
    assert len(hours) == 24 + 1  # the hour that ends at the cutoff, and the last day


def test_pools_and_mig_instances(store: Store) -> None:
    f = fleet()

    def snap(at: float) -> FleetSnapshot:
        s = with_pools(snapshot(f, at), ["h100-train", "h100-train", ""])
        # node 1's four rows become four 3g.40gb instances, two on each of two GPUs
        gpus = s.gpus
        uuid = gpus.uuid.copy()
        uuid[[6, 7]] = uuid[[4, 5]]
        s = dataclasses.replace(s, gpus=dataclasses.replace(gpus, uuid=uuid))
        s = as_mig(s, [4, 5], "1", "3g.40gb")
        return as_mig(s, [6, 7], "2", "3g.40gb")

    meter = Meter(store)
    meter.record_cycle(snap(T0))
    meter.record_cycle(snap(T0 + 70))
    state = fleet_state(store)
    assert len(state) == 12  # a row per GPU or MIG instance (the primary key has the instance)
    mig = [s for s in state if s.mig_instance]
    assert len(mig) == 4 and {s.mig_profile for s in mig} == {"3g.40gb"}
    assert {s.pool for s in state if s.node == "node-000"} == {"h100-train"}
    assert {s.pool for s in state if s.node == "node-002"} == {""}
    share = 3 / 7
    web = 70 * 4 * share  # node 1: four instances of 3/7 of a GPU each
    assert by_key(usage(store, T0, T0 + 300, by="namespace"))["web"] == pytest.approx(
        (web, web, web, 0.0)
    )
    pools = by_key(usage(store, T0, T0 + 300, by="pool"))
    assert pools["h100-train"] == pytest.approx((70 * 4 + web, 70 * 4 + web, 70 * 2 + web, 0.0))
    assert pools[""] == pytest.approx((70 * 4, 0.0, 0.0, 0.0))


def test_upgrade_from_0001_keeps_the_journal_and_downgrades(store_url: str) -> None:
    from alembic import command

    from database.engine import alembic_config, make_engine, upgrade

    engine = make_engine(store_url)
    try:
        upgrade(engine, "0001")
        assert not inspect(engine).has_table("metering_usage")
        Store(engine, "c").audit(1.0, "note", "written before 0002")
        Store.open(store_url, "c").close()  # migrates to head
        assert inspect(engine).has_table("metering_usage")
        assert [a.message for a in Store(engine, "c").audit_log()] == ["written before 0002"]
        cfg = alembic_config()
        with engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0001")
        names = set(inspect(engine).get_table_names())
        assert (
            not {tbl.name for tbl in (t.gpu_state, t.cursor, t.usage, t.usage_hourly, t.reports)}
            & names
            and "audit" in names
        )
    finally:
        engine.dispose()


def test_long_windows_read_hours_and_agree_with_five_minute_buckets(store: Store) -> None:
    f = fleet()
    meter = Meter(store)
    for k in range(0, 3 * 3600 + 1, 45):  # three hours, 45 s apart: intervals cross buckets
        meter.record_cycle(snapshot(f, T0 + 100 + k))
    start, end = T0 + 1200, T0 + 3 * 3600 - 600  # ragged ends, two whole hours between
    fine = usage(store, start, end, by="namespace", per_bucket=True)
    assert {r.bucket for r in fine} == set(range(int(start), int(end), 300))
    whole = usage(store, start, end, by="namespace")
    for ns in ("ml", "web"):
        (row,) = [r for r in whole if r.key == ns]
        mine = [r for r in fine if r.key == ns]
        assert row.allocated_gpu_hours == pytest.approx(sum(r.allocated_gpu_hours for r in mine))
        assert row.busy_gpu_hours == pytest.approx(sum(r.busy_gpu_hours for r in mine))
    hourly = usage(store, T0, T0 + 4 * 3600, by="fleet", per_bucket=True, resolution=3600)
    five = usage(store, T0, T0 + 4 * 3600, by="fleet", per_bucket=True)
    assert [r.bucket for r in hourly] == [int(T0) + h * 3600 for h in range(4)]
    for h in hourly:
        lo = h.bucket or 0
        inside = [r.gpu_hours for r in five if lo <= (r.bucket or 0) < lo + 3600]
        assert h.gpu_hours == pytest.approx(sum(inside))
    with pytest.raises(ValueError, match="resolution"):
        usage(store, T0, T0 + 60, per_bucket=True, resolution=60)
    with pytest.raises(ValueError, match="by: expected one of"):
        usage(store, T0, T0 + 60, by="rack")  # type: ignore[arg-type]


def test_a_lost_gpu_stays_in_the_fleet_state_as_lost(store: Store) -> None:
    """XID 79: the GPU stops reporting and leaves the snapshot. The grid must show the hole
    (its last row, marked lost) rather than a smaller, healthy-looking node."""
    meter = Meter(store)
    meter.record_cycle(snapshot(fleet(), T0))
    fewer = Fleet(nodes=3, gpus_per_node=3)  # device 3 of every node stops reporting
    lost = Finding(
        FindingKind.GPU_LOST, Severity.CRITICAL, "gone", T0, T0 + 30,
        node="node-002", gpu_uuid="GPU-002-3",
    )  # fmt: skip
    for at in (T0 + 30, T0 + 60):  # kept cycle after cycle while the finding holds
        meter.record_cycle(snapshot(fewer, at), findings=[lost])
        state = {s.uuid: s for s in fleet_state(store)}
        assert state["GPU-002-3"].health == Health.LOST and state["GPU-002-3"].issue == "gpu_lost"
        assert (state["GPU-002-3"].node, state["GPU-002-3"].device) == ("node-002", 3)
        assert state["GPU-002-3"].utilization is None and not state["GPU-002-3"].allocated
        assert "GPU-001-3" not in state  # gone without a gpu_lost finding: not invented
    assert len(state) == 9 + 1


def test_a_lost_gpu_still_listed_is_lost_even_on_a_quarantined_node(store: Store) -> None:
    """The exporter may keep a row for a GPU that fell off the bus; on a node gpufleet
    quarantined it is still the one GPU that is gone, not one of eight quarantined ones."""
    lost = Finding(
        FindingKind.GPU_LOST, Severity.CRITICAL, "gone", T0, T0,
        node="node-002", gpu_uuid="GPU-002-1",
    )  # fmt: skip
    Meter(store).record_cycle(quarantine(snapshot(fleet(), T0), node=2), findings=[lost])
    state = {s.uuid: s for s in fleet_state(store)}
    assert state["GPU-002-1"].health == Health.LOST
    assert {state[f"GPU-002-{d}"].health for d in (0, 2, 3)} == {Health.QUARANTINED}
