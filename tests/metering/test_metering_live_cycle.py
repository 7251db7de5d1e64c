"""The live cycle records metering after remediation; a metering failure is reported as the
cycle's `meter` error and never stops detection or the next cycle."""

from __future__ import annotations

from sqlalchemy import text

from detectors.suite import DetectorSuite
from gpufleet.live_cycle import LiveCycle
from metering import Meter, fleet_state, last_cycle, usage
from observer.fleet.model import FleetSnapshot
from remediations.store import Store
from tests.metering.support import T0, fleet, snapshot


def test_live_cycle_records_and_survives_a_metering_failure(store: Store) -> None:
    f = fleet()
    clock = [T0]

    def collect() -> FleetSnapshot:
        return snapshot(f, clock[0])

    cycle = LiveCycle(collect, DetectorSuite.default(), meter=Meter(store))
    for k in range(3):
        clock[0] = T0 + 30 * k
        assert cycle.run_once(clock[0]).ok
    assert last_cycle(store) == T0 + 60 and len(fleet_state(store)) == 12
    (fleet_row,) = usage(store, T0, T0 + 300, by="fleet")
    assert fleet_row.gpu_hours * 3600 == 12 * 60
    with store.engine.begin() as conn:
        conn.execute(text("DROP TABLE metering_cursor"))  # a broken store, for real
    clock[0] = T0 + 90
    report = cycle.run_once(clock[0])
    assert [e.stage for e in report.errors] == ["meter"]
    assert report.gpus == 12  # detection ran; the cycle completed
