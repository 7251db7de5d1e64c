"""Detector state keyed by entity (GPU UUID, job key), stored as numpy columns.

GPUs come and go between snapshots (a node joins, a GPU falls off the bus, a MIG layout changes),
so positions are not stable identities. Every per-GPU or per-job state is a `KeyedArrays`: the
keys of the rows plus parallel columns. Each cycle it is re-aligned to the new snapshot's keys:
free when the key array is the very same object or equal, one vectorised sort + searchsorted
when it changed. States are immutable by convention: a detector never writes into the arrays of
the state it was given, it builds new ones (numpy expressions do that anyway).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt

from detectors.identity_memo import IdentityMemo, read_only
from observer.fleet.model import FleetSnapshot, IntArray, Job, StrArray

AnyArray = npt.NDArray[Any]
ColumnSpec = Mapping[str, tuple[Any, Any]]
"""Column name -> (numpy dtype, fill value for rows that are new)."""


@dataclass(frozen=True, slots=True)
class KeyedArrays:
    """Rows keyed by string (GPU UUID, job key) with parallel numpy columns."""

    keys: StrArray
    cols: Mapping[str, AnyArray]

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    def __getitem__(self, name: str) -> AnyArray:
        return self.cols[name]

    def nbytes(self) -> int:
        """Bytes of the columns (the key array is shared with the snapshot, so not counted)."""
        return int(sum(a.nbytes for a in self.cols.values()))

    def replace(self, **cols: AnyArray) -> KeyedArrays:
        merged = dict(self.cols)
        merged.update(cols)
        return KeyedArrays(self.keys, MappingProxyType(merged))


@dataclass(frozen=True, slots=True)
class GpuCycleState:
    """Per-GPU columns plus the time of the cycle that wrote them: most detectors' whole state."""

    gpus: KeyedArrays
    last_now: float

    def nbytes(self) -> int:
        return self.gpus.nbytes()


def empty(keys: StrArray, spec: ColumnSpec) -> KeyedArrays:
    n = int(keys.shape[0])
    cols = {name: np.full(n, fill, dtype=dtype) for name, (dtype, fill) in spec.items()}
    return KeyedArrays(keys, MappingProxyType(cols))


_cache_lock = threading.Lock()
_last: tuple[StrArray, StrArray, IntArray] | None = None


def _mapping(old: StrArray, new: StrArray) -> IntArray:
    """For each new key, its row in `old`, or -1. Vectorised (no Python loop over rows).

    The last answer is cached by array identity: every detector of a suite re-aligns from the same
    old key array to the same new one in a cycle, so the sort is paid once per cycle.
    """
    global _last
    with _cache_lock:
        hit = _last
    if hit is not None and hit[0] is old and hit[1] is new:
        return hit[2]
    if old.shape[0] == 0 or new.shape[0] == 0:
        out: IntArray = np.full(new.shape[0], -1, dtype=np.int32)
    else:
        o = old.astype(str)
        n = new.astype(str)
        order = np.argsort(o, kind="stable")
        sorted_old = o[order]
        pos = np.searchsorted(sorted_old, n)
        pos = np.minimum(pos, sorted_old.shape[0] - 1)
        found = sorted_old[pos] == n
        out = np.where(found, order[pos], -1).astype(np.int32)
    with _cache_lock:
        _last = (old, new, out)
    return out


def align(prev: KeyedArrays | None, keys: StrArray, spec: ColumnSpec) -> KeyedArrays:
    """`prev` re-ordered to `keys`: kept rows carry over, new rows get the fill values."""
    if prev is None or set(prev.cols) != set(spec):
        return empty(keys, spec)
    if prev.keys is keys:
        return prev
    if prev.keys.shape == keys.shape and bool(np.array_equal(prev.keys, keys)):
        return KeyedArrays(keys, prev.cols)
    src = _mapping(prev.keys, keys)
    hit = src >= 0
    cols: dict[str, AnyArray] = {}
    for name, (dtype, fill) in spec.items():
        col = np.full(keys.shape[0], fill, dtype=dtype)
        col[hit] = prev.cols[name][src[hit]]
        cols[name] = col
    return KeyedArrays(keys, MappingProxyType(cols))


_last_keys: tuple[StrArray, StrArray, StrArray] | None = None
"""(uuid, mig_instance, keys) of the latest `gpu_keys` call: eight detectors ask per cycle, and
the MIG test alone reads 100k strings (~1.7 ms at 100k GPUs). Held by identity, so a snapshot's
own columns (immutable by convention) are never confused with another's."""


def mig_sliced(mig: StrArray) -> npt.NDArray[np.bool_]:
    """Rows that are MIG instances (read-only): gpu_keys and gpu_lost both ask, and the test
    reads every row's string (~2 ms at 100k GPUs); the same answer while the column is."""
    return _SLICED.get((mig,), lambda: read_only(np.asarray(mig != "", dtype=bool)))


_SLICED: IdentityMemo[npt.NDArray[np.bool_]] = IdentityMemo()


def gpu_keys(snapshot: FleetSnapshot) -> StrArray:
    """Stable per-row identity: the UUID, or `UUID/GPU_I_ID` for MIG slices."""
    global _last_keys
    g = snapshot.gpus
    uuid, mig = g.uuid, g.mig_instance
    last = _last_keys
    if last is not None and last[0] is uuid and last[1] is mig:
        return last[2]
    sliced = mig_sliced(mig)
    if mig.shape[0] == 0 or not bool(np.any(sliced)):
        keys = uuid
    else:
        keys = uuid.copy()
        keys[sliced] = uuid[sliced] + "/" + mig[sliced]
    _last_keys = (uuid, mig, keys)
    return keys


def job_keys(snapshot: FleetSnapshot) -> StrArray:
    """The jobs' keys (read-only): the same array while the snapshot's jobs tuple is, so the
    job state's re-alignment finds the very same keys."""
    return _JOB_KEYS.get((snapshot.jobs,), lambda: _job_keys(snapshot.jobs))


def _job_keys(jobs: tuple[Job, ...]) -> StrArray:
    keys = np.empty(len(jobs), dtype=object)
    for i, job in enumerate(jobs):
        keys[i] = job.key
    return read_only(keys)


_JOB_KEYS: IdentityMemo[StrArray] = IdentityMemo()
