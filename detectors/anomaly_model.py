"""The anomaly detector's forest: fitted on a schedule of fleet time, scored every cycle.

Fitting an IsolationForest every cycle cost ~45 ms whatever the fleet size (issue 25: 2,880
fits in a 24 h replay at 30 s steps, most of the backtest's time). The forest reads peer-
normalised features (robust z-scores against each GPU's peers, recomputed every cycle), whose
distribution stays put from cycle to cycle, so a forest fitted on one cycle scores the next
ones as well. It is refitted when fleet time crosses a boundary of `refit_seconds` (aligned to
the epoch, so a replay started anywhere refits at the same instants as a sequential one), when
the feature columns change, and when the population it may be fitted on changes by more than
`refit_population_change`.

Tried and dropped: skipping GPUs inside a cube |z| <= r that provably cannot score below the
threshold (the per-tree shortest path into the cube). The bound is a mean of per-tree minima
reached in different corners, so on the suite's fleets it allowed r = 0 or 1, which skips few.
Also dropped, measured first (issue 25): keeping last cycle's result for a GPU that stays in
the leaves it reached. Between two cycles of one forest, the GPUs in the same leaves of the
first 4 trees read were 1.4 % on the 10k bench fleet, 19 % on lab/suite/mixed-2048-30s and
37 % on novel-faults-30s, and of the first 16 trees 0 %, 2 % and 9 %: peer z-scores move by
more than a leaf's width from one scrape to the next.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from detectors.anomaly_score import LeafDepths
from observer.fleet.model import FloatArray

SAMPLE_POOL = 16
"""Rows the trees draw their samples from, in multiples of `max_samples`."""


@dataclass(frozen=True, slots=True)
class FittedForest:
    """An IsolationForest with what it was fitted on, so that a cycle knows when to refit."""

    forest: Any
    names: tuple[str, ...]
    """The feature columns it was fitted on, in order."""
    population: int
    """How many GPUs it could be fitted on (rows with peers and complete data)."""
    fitted_at: float
    depths: LeafDepths
    """Its trees' leaf depths, to score rows and settle them early (detectors.anomaly_score)."""

    def score(self, x: FloatArray) -> FloatArray:
        """Every row's score, bit-identical to the forest's `score_samples`."""
        return self.depths.full(x)

    def below(self, x: FloatArray, threshold: float) -> tuple[npt.NDArray[np.bool_], FloatArray]:
        """Rows scoring below `threshold`, and their scores (NaN where not needed to say so)."""
        return self.depths.below(x, threshold)


def due(
    model: FittedForest | None,
    names: tuple[str, ...],
    population: int,
    now: float,
    every: float,
    population_change: float,
) -> bool:
    """Whether the forest must be (re)fitted before scoring the cycle at `now`."""
    if model is None or model.names != names:
        return True
    if math.floor(now / every) != math.floor(model.fitted_at / every):
        return True
    return abs(population - model.population) > population_change * model.population


def fit(x: FloatArray, names: tuple[str, ...], at: float, params: Any) -> FittedForest:
    """Fit on `x`'s rows (`params`: n_estimators, max_samples, seed), deterministically.

    Each tree draws its own `max_samples` rows from a fixed-seed pool of at most SAMPLE_POOL x
    max_samples rows: sklearn's bagging weighs every row passed to `fit` for every tree, which
    cost ~220 ms at 100k GPUs for trees that read 256 rows each."""
    from sklearn.ensemble import IsolationForest  # heavy import only when enabled

    n = x.shape[0]
    pool = SAMPLE_POOL * params.max_samples
    if n > pool:
        rng = np.random.default_rng(params.seed)
        x = x[np.sort(rng.choice(n, size=pool, replace=False))]
    forest = IsolationForest(
        n_estimators=params.n_estimators,
        max_samples=min(params.max_samples, x.shape[0]),
        random_state=params.seed,
    ).fit(x)
    return FittedForest(forest, names, n, at, LeafDepths.of(forest, x))
