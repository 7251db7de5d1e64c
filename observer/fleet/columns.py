"""Vectorised column primitives for the snapshot builder: factorise, look up, keep the newest.

String columns are object arrays; numpy cannot hash them, and sorting 100k Python strings costs
more than hashing them. So the work is split: numpy finds *runs* of equal neighbours (GPUs of one
node or one pod arrive together) and *blocks* that repeat earlier rows in order (one metric's
series after another's), and a dict hashes only run heads and block heads; the remaining key
lookups go through `map(dict.get, ...)`, which runs in C without a Python frame per GPU.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from itertools import repeat
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from observer.fleet.model import NO_INDEX, BoolArray, FloatArray, IntArray, StrArray

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


def newest_per_position(pos: np.ndarray, timestamp: FloatArray) -> tuple[Positions, int, int]:
    """Which series to keep: (indices into the series, duplicates dropped, unknown dropped).

    Series with pos NO_INDEX are dropped; among series of one position the newest sample wins
    (a NaN timestamp is oldest), ties go to the later series. Two `ufunc.at` passes, no sort.
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
    best = np.full(counts.size, -np.inf)
    np.maximum.at(best, p, ts)
    newest = np.flatnonzero(ts == best[p])
    last = np.full(counts.size, -1, dtype=np.intp)
    np.maximum.at(last, p[newest], newest)
    keep = idx[last[last >= 0]]
    return keep, int(p.size - keep.size), n_unknown


CHUNK = 1 << 16
BLOCK = 64


def first_occurrence(keys: StrArray, chunk: int = CHUNK) -> tuple[Positions, dict[Any, int]]:
    """Per row, the first row holding the same key; and the index key -> first row.

    Rows that repeat earlier rows in the same order (identity rows gathered from one metric's
    series after another's) are matched by hashing one key per 64-row block and comparing whole
    blocks vectorised; every other row is hashed (`dict.setdefault` through `map`, in C).
    """
    n = len(keys)
    first = np.empty(n, dtype=np.intp)
    index: dict[Any, int] = {}
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        rest = np.arange(start, stop)
        if start:
            aligned = _aligned_rows(keys, start, stop, index, first)
            if aligned is not None:
                rest = rest[~aligned]
        first[rest] = np.fromiter(
            map(index.setdefault, keys[rest].tolist(), rest.tolist()), np.intp, count=rest.size
        )
    return first, index


def _aligned_rows(
    keys: StrArray, start: int, stop: int, index: Mapping[Any, int], first: Positions
) -> BoolArray | None:
    """Rows start..stop that repeat, block by block, rows before `start` (their `first` is
    filled in); None when too few blocks line up to be worth it."""
    heads = np.arange(start, stop, BLOCK)
    head_row = lookup(keys[heads], index).astype(np.intp)
    tails = np.minimum(heads + BLOCK - 1, stop - 1)
    tail_row = np.where(head_row >= 0, head_row + (tails - heads), -1)
    probe = (tail_row >= 0) & (tail_row < start)
    probe[probe] = keys[tail_row[probe]] == keys[tails[probe]]
    if np.count_nonzero(probe) < heads.size // 2:
        return None
    block = (np.arange(start, stop) - start) // BLOCK
    cand = np.where(
        head_row[block] >= 0, head_row[block] + (np.arange(start, stop) - heads[block]), -1
    )
    ok = (cand >= 0) & (cand < start)
    cand[~ok] = 0
    ok &= keys[cand] == keys[start:stop]
    first[start:stop][ok] = first[cand[ok]]
    return ok


A = TypeVar("A", bound=np.ndarray)


def readonly(arr: A) -> A:
    """The same array, frozen: a snapshot's columns cannot be written through."""
    arr.flags.writeable = False
    return arr
