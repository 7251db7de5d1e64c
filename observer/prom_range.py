"""Range collection: split a long replay window into chunks on the step grid.

A replay (`backtest`) reads one chunk of raw samples at a time (observer.prom_raw), so that no
single answer, and no chunk's grids, grow without bound.
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
