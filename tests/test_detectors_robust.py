"""Property: no detector raises, on any fleet shape or data quality, and findings serialise."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detectors.signals import THROTTLE, XID
from detectors.suite import DetectorSuite
from tests.fleet import HEALTHY_TRAINING, Fleet

T0 = 1_767_225_600.0


@st.composite
def fleets(draw: st.DrawFn) -> tuple[Fleet, int]:
    nodes = draw(st.integers(1, 4))
    per = draw(st.integers(1, 8))
    fleet = Fleet(nodes=nodes, gpus_per_node=per)
    if draw(st.booleans()):
        fleet.job("ns/a", list(range(draw(st.integers(1, nodes)))))
    seed = draw(st.integers(0, 2**31 - 1))
    fleet.source_ok = draw(st.booleans()) or draw(st.booleans())
    return fleet, seed


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets())
def test_no_detector_raises_and_findings_serialise(case: tuple[Fleet, int]) -> None:
    fleet, seed = case
    rng = np.random.default_rng(seed)
    names = list(dict.fromkeys([*DetectorSuite.default().names, "anomaly"]))
    suite = DetectorSuite.default(names)
    state = None
    for k in range(6):
        for name in HEALTHY_TRAINING:
            v = (
                rng.uniform(0, 100, fleet.n)
                if name not in (XID, THROTTLE)
                else rng.choice([0.0, 13.0, 48.0, 79.0, 255.0, 1e6, float(0x48)], fleet.n)
            )
            v[rng.random(fleet.n) < 0.2] = np.nan
            fleet.values[name] = v
        fleet.age = rng.choice([0.0, 20.0, 100.0, 1e4], fleet.n)
        fleet.set_increase("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", float(rng.normal(0, 1e4)))
        fleet.dropped = set(
            rng.choice(fleet.n, size=rng.integers(0, fleet.n), replace=False).tolist()
        )
        fleet.steps_increase = {"ns/a": float(rng.choice([0.0, 5.0, np.nan]))}
        now = T0 + 30 * k
        res = suite.run(fleet.snapshot(now), now, state)
        state = res.state
        assert res.failures == (), res.failures
        for f in res.findings:
            json.dumps(f.to_json(), allow_nan=False)
            assert f.first_seen <= f.last_seen == now
