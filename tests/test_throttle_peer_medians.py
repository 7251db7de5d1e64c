"""gpu_throttle's evidence compares a GPU with its model's other GPUs: the medians it shows are
`np.median` over exactly those GPUs (its own value left out, NaN skipped), however they are
computed."""

from __future__ import annotations

import numpy as np

from detectors.gpu_throttle import Params, _Compared, _median_without


def _reference(i: int, values: np.ndarray, model: np.ndarray) -> float | None:
    peers = model == model[i]
    peers[i] = False
    had = peers & ~np.isnan(values)
    return float(np.median(values[had])) if had.any() else None


def test_peer_medians_equal_numpy_over_the_other_gpus_of_the_model() -> None:
    rng = np.random.default_rng(25)
    for _ in range(400):
        n = int(rng.integers(1, 40))
        model = rng.integers(0, 3, n).astype(np.int32)
        clock = np.round(rng.normal(1900, 40, n), int(rng.integers(0, 2)))
        temp = np.round(rng.normal(60, 5, n), 1)
        clock[rng.random(n) < 0.2] = np.nan
        if rng.random() < 0.2:
            temp[:] = 55.0  # every GPU alike
        compared = _Compared(clock, temp, model)
        for i in rng.permutation(n)[:5]:
            got = compared(int(i), np.full(n, np.nan), Params())
            for name, values in (("sm_clock_mhz", clock), ("gpu_temp_c", temp)):
                want = _reference(int(i), values, model)
                key = f"peers_median_{name}"
                assert got.get(key) == (None if want is None else round(want, 1)), (i, name)
                mine = values[model == model[i]]
                exact = _median_without(np.sort(mine[~np.isnan(mine)]), float(values[i]))
                assert exact == want, (i, name)  # bit for bit, before rounding
            if got:
                assert got["peers_compared"] == float((model == model[i]).sum() - 1)
