"""Vectorised column primitives for the snapshot builder: factorise, look up, keep the newest.

String columns are object arrays; numpy cannot hash them, and sorting 100k Python strings costs
more than hashing them. So the work is split: numpy finds *runs* of equal neighbours (GPUs of one
node or one pod arrive together), and a dict hashes only the run heads; key lookups go through
`map(dict.get, ...)`, which runs in C without a Python frame per GPU.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from itertools import repeat
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from observer.model import NO_INDEX, FloatArray, IntArray, StrArray

Positions = npt.NDArray[np.intp]


def run_starts(*columns: np.ndarray) -> Positions:
    """Positions where any column differs from the row before (always includes 0)."""
    n = len(columns[0])
    if n == 0:
        return np.zeros(0, dtype=np.intp)
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for col in columns:
        change[1:] |= col[1:] != col[:-1]
    return np.flatnonzero(change)


def expand_runs(starts: Positions, head_values: np.ndarray, n: int) -> np.ndarray:
    """Broadcast one value per run back to all `n` rows."""
    run_of_row = np.zeros(n, dtype=np.intp)
    run_of_row[starts[1:]] = 1
    np.cumsum(run_of_row, out=run_of_row)
    return head_values[run_of_row]


def factorize(values: StrArray) -> tuple[IntArray, list[str]]:
    """(code per row, distinct values in first-seen order), hashing only run heads."""
    n = len(values)
    starts = run_starts(values)
    heads = values[starts]
    uniques = list(dict.fromkeys(heads.tolist()))
    index = {v: i for i, v in enumerate(uniques)}
    head_codes = np.fromiter(map(index.__getitem__, heads), dtype=np.int32, count=len(heads))
    return expand_runs(starts, head_codes, n).astype(np.int32, copy=False), uniques


def lookup(keys: np.ndarray, index: Mapping[Any, int]) -> IntArray:
    """Position of each key in `index`, NO_INDEX where absent."""
    n = len(keys)
    return np.fromiter(map(index.get, keys, repeat(NO_INDEX, n)), dtype=np.int32, count=n)


def lookup_runs(index: Mapping[Any, int], *columns: StrArray) -> IntArray:
    """`lookup` of tuple keys (or single keys) built from columns, hashing run heads only."""
    n = len(columns[0])
    starts = run_starts(*columns)
    heads: Sequence[Hashable]
    if len(columns) == 1:
        heads = columns[0][starts].tolist()
    else:
        heads = list(zip(*(c[starts].tolist() for c in columns), strict=True))
    head_pos = np.fromiter(
        map(index.get, heads, repeat(NO_INDEX, len(heads))), dtype=np.int32, count=len(heads)
    )
    return expand_runs(starts, head_pos, n).astype(np.int32, copy=False)


def same_keys(a: np.ndarray, b: np.ndarray) -> bool:
    """Elementwise equality of two key columns (cheap: string compare, no hashing)."""
    return a is b or (a.shape == b.shape and bool((a == b).all()))


def newest_per_position(pos: IntArray, timestamp: FloatArray) -> tuple[Positions, int, int]:
    """Which series to keep: (indices into the series, duplicates dropped, unknown dropped).

    Series with pos NO_INDEX are dropped; among series of one position the newest sample wins
    (a NaN timestamp is oldest), ties go to the later series.
    """
    known = pos >= 0
    n_unknown = int(pos.shape[0] - np.count_nonzero(known))
    idx = np.flatnonzero(known) if n_unknown else np.arange(pos.shape[0])
    p = pos[idx]
    if p.size == 0:
        return idx, 0, n_unknown
    counts = np.bincount(p)
    if counts.max() <= 1:
        return idx, 0, n_unknown
    ts = np.nan_to_num(timestamp[idx], nan=-np.inf)
    order = np.lexsort((np.arange(p.size), ts, p))
    ps = p[order]
    last = np.ones(ps.size, dtype=bool)
    last[:-1] = ps[1:] != ps[:-1]
    keep = idx[order[last]]
    return keep, int(p.size - keep.size), n_unknown


def scatter(n: int, pos: IntArray, values: FloatArray) -> FloatArray:
    """A read-only column of `n` rows: `values` at `pos`, NaN elsewhere."""
    out = np.full(n, np.nan)
    out[pos] = values
    return readonly(out)


A = TypeVar("A", bound=np.ndarray)


def readonly(arr: A) -> A:
    """The same array, frozen: a snapshot's columns cannot be written through."""
    arr.flags.writeable = False
    return arr
