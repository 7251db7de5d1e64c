"""Range collection: split a long window into chunks, and a chunk's matrices into per-step vectors.

A replay (`backtest`) asks the instant cycle's queries as range queries, one chunk at a time so
that no single answer grows without bound, then hands each evaluation step to the same assembly
as an instant cycle: one code path, one snapshot shape, whatever the clock. The gauge answers
(most of the points) go through ValueMatrix, an array per chunk, instead of a row per point.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from observer.catalog import LABEL_MIG_INSTANCE, LABEL_POD, LABEL_UUID, canonical_name
from observer.prom_parse import Columns

Matrix = Sequence[Mapping[str, Any]]


def chunks(start: float, end: float, step: float, max_span: float) -> Iterator[tuple[float, float]]:
    """[c0, c1] pairs covering start..end on the step grid, each at most `max_span` long."""
    if step <= 0:
        raise ValueError("step must be positive")
    if end < start:
        return
    per_chunk = max(1, int(max_span // step))
    total = math.floor((end - start) / step + 1e-9) + 1
    k = 0
    while k < total:
        n = min(per_chunk, total - k)
        c0 = start + k * step
        yield c0, c0 + (n - 1) * step
        k += n


def split_matrix(
    answers: Mapping[str, Matrix | None], start: float, end: float, step: float
) -> list[tuple[float, dict[str, list[dict[str, Any]] | None]]]:
    """Per evaluation time, each query's instant vector (None where the query failed).
    Answers whose name starts with `values:` are left out: see ValueMatrix."""
    n = math.floor((end - start) / step + 1e-9) + 1
    times = [start + k * step for k in range(n)]
    out: list[dict[str, list[dict[str, Any]] | None]] = [{} for _ in times]
    for name, matrix in answers.items():
        if name.startswith("values:"):  # ValueMatrix carries them; keep "answered or failed"
            for per in out:
                per[name] = None if matrix is None else []
            continue
        if matrix is None or (matrix and not isinstance(matrix[0], Mapping)):
            for per in out:  # a failed query, or a non-matrix answer (label values): as is
                per[name] = None if matrix is None else list(matrix)
            continue
        buckets: list[list[dict[str, Any]]] = [[] for _ in times]
        for series in matrix:
            metric = series["metric"]
            for point in series["values"]:
                k = round((float(point[0]) - start) / step)
                if 0 <= k < n:
                    buckets[k].append({"metric": metric, "value": point})
        for per, bucket in zip(out, buckets, strict=True):
            per[name] = bucket
    return list(zip(times, out, strict=True))


class ValueMatrix:
    """A chunk's `values:*` matrices as one (series x step) array, sliced per step into family
    columns without building a row per point (the bulk of a range replay's answers)."""

    def __init__(self, matrices: Sequence[Matrix], start: float, step: float, n: int) -> None:
        series = [s for m in matrices for s in m]
        self.values = np.full((len(series), n), np.nan)
        for i, s in enumerate(series):
            points = np.asarray(s["values"], dtype=np.float64).reshape(-1, 2)
            k = np.rint((points[:, 0] - start) / step).astype(np.intp)
            ok = (k >= 0) & (k < n)
            self.values[i, k[ok]] = points[ok, 1]
        metas = [s["metric"] for s in series]
        self.uuid = np.array([m.get(LABEL_UUID, "") for m in metas] or [""], dtype=object)
        self.mig = np.array([m.get(LABEL_MIG_INSTANCE, "") for m in metas] or [""], dtype=object)
        self.pod = [m.get(LABEL_POD, "") for m in metas]
        families: dict[str, list[int]] = {}
        for i, m in enumerate(metas):
            families.setdefault(canonical_name(m.get("__name__", "")), []).append(i)
        self.by_family = {f: np.asarray(ix, dtype=np.intp) for f, ix in families.items()}

    def columns(self, k: int, newest_pod: Mapping[str, str] | None) -> dict[str, Columns]:
        """Family -> (UUIDs, MIG ids, values) at step k; with `newest_pod`, only each listed
        GPU's current pod's series (an old pod's series lingers without staleness markers)."""
        col = self.values[:, k]
        out: dict[str, Columns] = {}
        for fam, idx in self.by_family.items():
            p = idx[~np.isnan(col[idx])]
            if newest_pod:
                keep = [
                    newest_pod.get(f"{u}/{g}" if g else u, self.pod[i]) == self.pod[i]
                    for i, u, g in zip(p.tolist(), self.uuid[p].tolist(), self.mig[p].tolist(),
                                       strict=True)
                ]  # fmt: skip
                p = p[np.asarray(keep, dtype=bool)] if p.size else p
            out[fam] = (self.uuid[p].tolist(), self.mig[p].tolist(), col[p])
        return out
