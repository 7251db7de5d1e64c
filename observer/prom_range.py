"""Range collection: split a long window into chunks, and a chunk's matrices into per-step vectors.

A replay (`backtest`) asks the instant cycle's queries as range queries, one chunk at a time so
that no single answer grows without bound, then hands each evaluation step to the same assembly
as an instant cycle: one code path, one snapshot shape, whatever the clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

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
    """Per evaluation time, each query's instant vector (None where the query failed)."""
    n = math.floor((end - start) / step + 1e-9) + 1
    times = [start + k * step for k in range(n)]
    out: list[dict[str, list[dict[str, Any]] | None]] = [{} for _ in times]
    for name, matrix in answers.items():
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
