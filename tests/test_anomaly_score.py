"""The anomaly forest's early-settling scorer says the same as scikit-learn's `score_samples`."""

from __future__ import annotations

import numpy as np
from sklearn.ensemble import IsolationForest

from detectors.anomaly import Params
from detectors.anomaly_model import fit

THRESHOLD = Params().score_threshold


def _fleet(rng: np.random.Generator, n: int) -> np.ndarray:
    """Peer z-scores: most GPUs noise around 0, a few far off on one or several gauges."""
    x = rng.normal(0.0, 1.0, (n, 9))
    odd = rng.choice(n, size=n // 100, replace=False)
    x[odd] += rng.normal(0.0, 4.0, (odd.size, 9)) * (rng.random((odd.size, 9)) < 0.4)
    return x


def test_flags_and_reported_scores_equal_score_samples_and_most_rows_settle_early() -> None:
    rng = np.random.default_rng(25)
    model = fit(_fleet(rng, 20_000), tuple(f"f{i}" for i in range(9)), 0.0, Params())
    assert isinstance(model.forest, IsolationForest)
    for _ in range(3):  # later cycles: new noise, the same forest
        x = _fleet(rng, 20_000)
        truth = model.forest.score_samples(x)
        low, scores = model.below(x, THRESHOLD)
        assert np.array_equal(low, truth < THRESHOLD)
        assert 0 < low.sum() < 1_000
        scored = ~np.isnan(scores)
        assert scored[low].all()  # every flagged GPU has its exact score for the evidence
        assert np.array_equal(scores[scored], truth[scored])  # bit-identical where given
        assert scored.mean() < 0.2  # most GPUs were settled before the last tree
        assert np.array_equal(model.score(x), truth)


def test_a_row_at_the_threshold_is_decided_as_score_samples_decides_it() -> None:
    """Rows whose score sits on the threshold: the bound's slack keeps them open to the end."""
    rng = np.random.default_rng(7)
    model = fit(_fleet(rng, 5_000), tuple(f"f{i}" for i in range(9)), 0.0, Params())
    x = _fleet(rng, 5_000)
    truth = model.forest.score_samples(x)
    for threshold in np.unique(truth)[::97]:  # thresholds exactly at rows' scores
        low, _ = model.below(x, float(threshold))
        assert np.array_equal(low, truth < threshold)
