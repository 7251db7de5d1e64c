"""Range collection: split a long replay window into chunks on the step grid.

A replay (`backtest`) reads one chunk of raw samples at a time
(observer.prometheus.replay.range_replay), so that no
single answer, and no chunk's grids, grow without bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterator


def chunks(
    start: float, end: float, step: float, max_span: float, first_span: float | None = None
) -> Iterator[tuple[float, float]]:
    """[c0, c1] pairs covering start..end on the step grid, each at most `max_span` long (the
    first at most `first_span`: a replay waits for its first chunk, and only for that one)."""
    if step <= 0:
        raise ValueError("step must be positive")
    if end < start:
        return
    per_chunk = max(1, int(max_span // step))
    first = per_chunk if first_span is None else max(1, min(per_chunk, int(first_span // step)))
    total = math.floor((end - start) / step + 1e-9) + 1
    k = 0
    while k < total:
        n = min(first if k == 0 else per_chunk, total - k)
        c0 = start + k * step
        yield c0, c0 + (n - 1) * step
        k += n
