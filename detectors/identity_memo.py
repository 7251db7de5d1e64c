"""The last reading computed from some snapshot parts, handed back while the very same parts
(by identity) come in again.

A replay steps through thousands of snapshots whose structure rarely changes: the snapshot
builder hands back the same node, pod and job tuples and the same GPU table while nobody came
or went (observer/snapshot/structure.py), and the snapshot's parts are frozen. What a detector
derives from them alone (pod hashes, node names per GPU) is then the same as last cycle, and
so are readings several detectors take from one snapshot (each GPU's newest sample). The memo
holds its sources, so an identity can never be a recycled one; the values it hands out are
read-only, as they are shared between cycles and detectors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import numpy as np

T = TypeVar("T")


def read_only(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """`a`, made read-only: shared readings must fail loudly if someone writes into them."""
    a.flags.writeable = False
    return a


class IdentityMemo(Generic[T]):
    """One remembered value and the objects it was computed from."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: tuple[tuple[object, ...], T] | None = None

    def get(self, sources: tuple[object, ...], compute: Callable[[], T]) -> T:
        """The remembered value if `sources` are the very objects it came from, else
        `compute()`'s, remembered in one assignment (safe for threads sharing the memo)."""
        last = self._last
        if last is not None and _same_objects(last[0], sources):
            return last[1]
        out = compute()
        self._last = (sources, out)
        return out


def _same_objects(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))
