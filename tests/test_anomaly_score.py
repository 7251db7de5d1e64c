"""The anomaly forest's early-settling scorer says the same as scikit-learn's `score_samples`."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
from sklearn.ensemble import IsolationForest

from detectors.anomaly import Params
from detectors.anomaly_model import fit
from detectors.anomaly_score import RADII, _shallowest, row_abs_max

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


def _walk(tree: Any, depth: np.ndarray, r: float) -> float:
    """The least depth term over the leaves reachable from the cube |x_f| <= r, by walking the
    tree with the cube's box (the definition the leaf-box table must equal)."""
    best = np.inf
    stack = [(0, np.full(tree.n_features, -r), np.full(tree.n_features, r))]
    while stack:
        node, lo, hi = stack.pop()
        if tree.children_left[node] == -1:
            best = min(best, float(depth[node]))
            continue
        f, cut = tree.feature[node], tree.threshold[node]
        if lo[f] <= cut:
            stack.append(
                (
                    tree.children_left[node],
                    lo,
                    np.where(np.arange(lo.size) == f, np.minimum(hi, cut), hi),
                )
            )
        if hi[f] > cut:
            stack.append(
                (
                    tree.children_right[node],
                    np.where(np.arange(lo.size) == f, np.maximum(lo, cut), lo),
                    hi,
                )
            )
    return best


def test_each_trees_shallowest_leaf_per_cube_equals_walking_the_tree() -> None:
    rng = np.random.default_rng(3)
    x = np.round(_fleet(rng, 3_000), 1)  # rounded: rows on the cuts' values, ties between cuts
    model = fit(x, tuple(f"f{i}" for i in range(9)), 0.0, Params(n_estimators=20))
    d = model.depths
    walked = np.array(
        [[_walk(t, depth, r) for t, depth in zip(d.trees, d.depth, strict=True)] for r in RADII]
    )
    assert d.least.tobytes() == walked.tobytes()
    assert (np.diff(walked, axis=0) <= 0).all() and (walked[0] > walked[-1]).any()


def test_a_leaf_behind_contradicting_cuts_is_never_reached() -> None:
    """x_0 <= 0, then x_0 > 1: that leaf (the shallowest term) is out of reach at every radius."""
    tree = SimpleNamespace(
        n_features=2,
        children_left=np.array([1, 3, -1, -1, -1]),
        children_right=np.array([2, 4, -1, -1, -1]),
        feature=np.array([0, 0, -2, -2, -2]),
        threshold=np.array([0.0, 1.0, -2.0, -2.0, -2.0]),
    )
    depth = np.array([9.0, 9.0, 5.0, 4.0, 0.0])
    radii = np.asarray(RADII)
    walked = [_walk(tree, depth, r) for r in RADII]
    assert _shallowest(tree, depth, radii).tolist() == walked == [4.0] * len(RADII)


def test_row_abs_max_equals_numpys_row_reductions() -> None:
    rng = np.random.default_rng(11)
    x = rng.normal(0.0, 3.0, (500, 10))
    x[rng.random(x.shape) < 0.05] = np.nan
    x[3] = np.nan
    x[4, 2], x[5, 7] = np.inf, -np.inf
    x32 = x.astype(np.float32)
    assert row_abs_max(x32).tobytes() == np.abs(x32).max(axis=1, initial=0.0).tobytes()
    assert np.array_equal(
        row_abs_max(x, skip_nan=True) >= 8.0, np.max(np.abs(np.nan_to_num(x)), axis=1) >= 8.0
    )
    assert row_abs_max(x.T.copy().T[:, :0]).tolist() == [0.0] * 500
