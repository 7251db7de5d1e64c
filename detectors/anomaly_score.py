"""Which rows an IsolationForest scores below a threshold, reading only the trees it takes.

At 100k GPUs, scoring every row with every tree was most of the detector cycle (issue 25: ~200
of ~300 ms in anomaly, 50 trees x 100k rows). A row's score is fixed by the sum of its leaves'
depths; once the trees read so far plus the shallowest leaf of every tree still unread already
reach the depth that the threshold stands for, no remaining tree can bring the row below it.
On the 100k bench fleet ~1.6M tree reads of 5M remain (trees ordered by the depth they add;
bounds per cube |z| <= r, so a row near its peers cannot count on a tree's outlier leaves).
Rows still open after the last tree have their full sum, accumulated tree by tree in
scikit-learn's order with its per-leaf terms, so their scores are bit-identical to
`IsolationForest.score_samples`, and so is every decision (tests/test_anomaly_score.py checks
both against scikit-learn itself; the per-leaf terms are the fitted forest's private
`_decision_path_lengths` and `_average_path_length_per_tree`, so that test guards an upgrade).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from observer.fleet.model import FloatArray

Floats = npt.NDArray[np.floating[Any]]

BLOCK = 4
"""Trees read between two compactions of the open rows (a compaction copies them)."""
MARGIN = 1e-9
"""Relative slack on the depth bound, so a rounding difference can only keep a row open."""
RADII = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 6.0, 8.0, 16.0, np.inf)
"""Cubes |z| <= r for which each tree's shallowest reachable leaf is known: a row inside a small
cube cannot reach a tree's outlier leaves, so its bound is tighter than the tree's minimum.
Quarter steps below 2, where most GPUs are (the 100k bench fleet: largest |z| of a GPU 0.93 at
the median, 1.68 at the 90th percentile): 1.71M -> 1.57M tree reads a cycle (finer steps or more
radii above 4 gave no further row)."""


@dataclass(frozen=True, slots=True)
class LeafDepths:
    """Per tree, each node's depth term (path length + average path of its leaf's samples - 1),
    and the smallest over its leaves."""

    trees: tuple[Any, ...]
    """Each estimator's `tree_` (scikit-learn's Cython tree): its own `apply` is the estimator's
    without the fitted-check and validation, ~13 us a call, 50-100 calls a cycle."""
    depth: tuple[FloatArray, ...]
    order: tuple[int, ...]
    """The order trees are read in: most depth above their shallowest leaf first (on the rows
    fitted on), so rows settle after fewer trees."""
    least: FloatArray
    """(len(RADII), trees): each tree's shallowest leaf reachable from inside each cube."""
    denominator: float

    @classmethod
    def of(cls, forest: Any, x: FloatArray) -> LeafDepths:
        """Of a fitted forest, with `x` (rows it was fitted on) to order its trees."""
        from sklearn.ensemble._iforest import _average_path_length

        depth = tuple(
            np.asarray(d + a - 1.0, dtype=np.float64)
            for d, a in zip(
                forest._decision_path_lengths, forest._average_path_length_per_tree, strict=True
            )
        )
        trees = tuple(e.tree_ for e in forest.estimators_)
        radii = np.asarray(RADII)
        least = np.stack(
            [_shallowest(t, d, radii) for d, t in zip(depth, trees, strict=True)], axis=1
        )
        per_tree = float(_average_path_length([forest._max_samples])[0])
        x32 = np.ascontiguousarray(x, dtype=np.float32)
        gain = [
            float(np.mean(d[t.apply(x32)])) - low
            for d, t, low in zip(depth, trees, least[-1], strict=True)
        ]
        order = tuple(int(i) for i in np.argsort(-np.asarray(gain), kind="stable"))
        return cls(trees, depth, order, least, len(depth) * per_tree)

    def below(self, x: FloatArray, threshold: float) -> tuple[npt.NDArray[np.bool_], FloatArray]:
        """(score < threshold per row, the score where every tree was read else NaN)."""
        n = x.shape[0]
        scores = np.full(n, np.nan)
        if n == 0 or self.denominator <= 0.0 or threshold >= 0.0:
            full = self.full(x)
            return full < threshold, full
        # score = -2 ** (-sum / denominator) < threshold  <=>  sum < bound
        bound = -np.log2(-threshold) * self.denominator * (1.0 + MARGIN)
        # rest[c, k]: the least the trees read after the k-th can add for a row inside cube c
        least = self.least[:, list(self.order)]
        rest = np.concatenate(
            (np.cumsum(least[:, ::-1], axis=1)[:, ::-1][:, 1:], np.zeros((len(RADII), 1))), axis=1
        )
        rows = np.arange(n)
        x32 = np.ascontiguousarray(x, dtype=np.float32)
        reach = np.nan_to_num(row_abs_max(x32), nan=np.inf)
        cube = np.zeros(n, dtype=np.intp)  # the smallest cube holding the row: RADII[cube]
        for r in RADII:
            cube += reach > np.float64(r)
        sums = np.zeros(n)
        for k, t in enumerate(self.order):
            sums += self.depth[t][self.trees[t].apply(x32)]
            if (k + 1) % BLOCK == 0:
                open_ = sums + rest[cube, k] < bound
                if not open_.all():
                    rows, x32, sums, cube = rows[open_], x32[open_], sums[open_], cube[open_]
        # The rows left open: their exact scores, summed in scikit-learn's tree order.
        scores[rows] = self.full(x[rows])
        return np.nan_to_num(scores, nan=0.0) < threshold, scores

    def full(self, x: FloatArray) -> FloatArray:
        """Every row's score, as `IsolationForest.score_samples`."""
        x32 = np.ascontiguousarray(x, dtype=np.float32)
        sums = np.zeros(x.shape[0])
        for tree, depth in zip(self.trees, self.depth, strict=True):
            sums += depth[tree.apply(x32)]
        out: FloatArray = -(2 ** (-(sums / self.denominator)))
        return out


def row_abs_max(x: Floats, skip_nan: bool = False) -> Floats:
    """Each row's largest |value| (0 without columns; NaN if one is NaN, unless `skip_nan`),
    column by column: numpy reduces short rows slowly (~4 against ~0.5 ms, 100k rows of 10)."""
    out: Floats = np.zeros(x.shape[0], dtype=x.dtype)
    larger = np.fmax if skip_nan else np.maximum
    for j in range(x.shape[1]):
        larger(out, np.abs(x[:, j]), out=out)
    return out


def _shallowest(tree: Any, depth: FloatArray, radii: FloatArray) -> FloatArray:
    """Per radius r, the least depth term over the leaves a point with every |x_f| <= r can reach.

    A leaf is reachable from the cube iff its path is (the left turns at cuts >= -r, the right
    turns at cuts < r, and no two cuts on one feature contradict each other): so each leaf's box
    is found once for all radii, level by level over the tree (a walk per radius and tree in
    Python was ~100 ms of every fit)."""
    leaves, lo, hi = _leaf_boxes(tree)
    reach = (hi[None] >= -radii[:, None, None]).all(axis=2)
    reach &= (lo[None] < radii[:, None, None]).all(axis=2)
    out: FloatArray = np.where(reach, depth[leaves][None], np.inf).min(axis=1, initial=np.inf)
    return out


def _leaf_boxes(tree: Any) -> tuple[npt.NDArray[np.intp], FloatArray, FloatArray]:
    """(leaf ids, (leaves, features) lower and upper cuts on their path: x_f > lo, x_f <= hi)
    of the leaves whose path is consistent (±inf where a feature is not cut)."""
    left, right, feature, cut = (
        tree.children_left,
        tree.children_right,
        tree.feature,
        tree.threshold,
    )
    nodes = np.zeros(1, dtype=np.intp)
    lo = np.full((1, tree.n_features), -np.inf)
    hi = np.full((1, tree.n_features), np.inf)
    found: list[tuple[npt.NDArray[np.intp], FloatArray, FloatArray]] = []
    while nodes.size:
        leaf = left[nodes] == -1
        found.append((nodes[leaf], lo[leaf], hi[leaf]))
        nodes, lo, hi = nodes[~leaf], lo[~leaf], hi[~leaf]
        rows, f, c = np.arange(nodes.size), feature[nodes], cut[nodes]
        lo_f, hi_f = lo[rows, f], hi[rows, f]
        to_left, to_right = lo_f <= c, hi_f > c  # some x_f in (lo, hi] on that side of the cut
        hi_left, lo_right = hi.copy(), lo.copy()
        hi_left[rows, f] = np.minimum(hi_f, c)
        lo_right[rows, f] = np.maximum(lo_f, c)
        nodes = np.concatenate((left[nodes][to_left], right[nodes][to_right]))
        lo = np.concatenate((lo[to_left], lo_right[to_right]))
        hi = np.concatenate((hi_left[to_left], hi[to_right]))
    return (
        np.concatenate([n for n, _, _ in found]),
        np.concatenate([a for _, a, _ in found]),
        np.concatenate([b for _, _, b in found]),
    )
