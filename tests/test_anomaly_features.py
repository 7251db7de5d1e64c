"""The anomaly detector's features are each GPU's distance from its peers' median in robust
spreads: z = (x - median) / max(1.4826 * MAD, floor), peers = same job and model.

Checked against that formula computed GPU by GPU with `np.median`, on two jobs with spread-out
readings, a gauge whose peers all agree (MAD 0: the floor divides) and a GPU without a reading.
"""

from __future__ import annotations

import numpy as np

from detectors.anomaly import FEATURES, FLOOR, _dense_ids, features
from detectors.signals import GPU_TEMP, POWER, SM_CLOCK, UTIL
from tests.fleet import Fleet

NOW = 1_000.0


def _by_formula(x: np.ndarray, peers: np.ndarray, floor: float) -> np.ndarray:
    z = np.full(x.shape[0], np.nan)
    for i in range(x.shape[0]):
        mine = x[peers == peers[i]]
        mine = mine[~np.isnan(mine)]
        med = np.median(mine)
        mad = np.median(np.abs(mine - med))
        z[i] = (x[i] - med) / max(1.4826 * mad, floor)
    return z


def test_each_feature_is_the_peer_z_of_the_formula() -> None:
    fleet = Fleet(nodes=4).job("ml/a", nodes=[0, 1]).job("ml/b", nodes=[2, 3])
    rng = np.random.default_rng(25)
    fleet.set(UTIL, np.round(rng.uniform(90, 100, fleet.n), 1))
    fleet.set(SM_CLOCK, np.round(rng.normal(1900, 80, fleet.n)))
    fleet.set(POWER, rng.normal(600, 40, fleet.n))
    fleet.set(POWER, 350.0, gpu=(2, 5))  # one GPU far below its job
    fleet.set(GPU_TEMP, np.nan, gpu=(1, 1))  # no reading: that GPU is not judged
    snap = fleet.snapshot(NOW)
    x, ok, names = features(snap, NOW, 75.0, min_peers=4)
    peers = np.repeat([0, 1], 16)
    values = {name: fleet.values[name] for name in names if name in fleet.values}
    assert {UTIL, SM_CLOCK, POWER, GPU_TEMP} <= set(values)
    for name, v in values.items():
        want = _by_formula(v, peers, FLOOR[FEATURES.index(name)])
        got = x[:, names.index(name)]
        assert np.allclose(got, want, rtol=1e-12, atol=0.0, equal_nan=True), name
    assert x[fleet.pos(2, 5), names.index(POWER)] < -4  # the low-power GPU stands out
    assert np.all(x[:, names.index(GPU_TEMP)][~np.isnan(x[:, names.index(GPU_TEMP)])] == 0.0)
    assert not ok[fleet.pos(1, 1)] and ok.sum() == fleet.n - 1


def test_peer_ids_number_the_groups_as_a_sort_of_their_codes_would() -> None:
    """Peer ids by a table of the codes present equal np.unique's inverse (and fall back to it
    for negative or sparse codes)."""
    rng = np.random.default_rng(4)
    for _ in range(300):
        high = int(rng.integers(1, 400))
        codes = rng.integers(-2 if rng.random() < 0.2 else 0, high, int(rng.integers(1, 200)))
        if rng.random() < 0.1:
            codes[0] = 10**9  # sparse: too large for a table
        ids, n = _dense_ids(codes)
        uniq, inverse = np.unique(codes, return_inverse=True)
        assert np.array_equal(ids, inverse) and n == uniq.size
