"""One replay chunk's raw samples -> per-GPU (key x step) grids, as the instant cycle sees them.

The instant cycle's answers (observer.prometheus.plan) are re-derived from raw samples here, for
every step of a chunk at once (observer.prometheus.replay.step_grid does the PromQL selector and
`increase`
semantics, observer.prometheus.replay.groups the `by (...)` reductions). Rows are GPU keys (`UUID`
or
`UUID/GPU_I_ID`), columns are steps. What each grid stands for:

- identity: label sets of the inventory metric present at each step, valued by their newest
  sample time (`max by (identity labels) (timestamp(inv))`); per key, the newest of them;
- memory (observer.prometheus.memory's rules, vectorised): per key the newest time ever seen, the
  label
  set of its newest row, and the GPUs seen within the inventory window but absent now
  (`vanished`); per node the newest sample of any of its GPUs (`up_last`);
- values: per family the GPU's value, keeping only its newest pod's series when an old pod's
  series still lingers (backfilled data carries no staleness markers); error counters only
  where non-zero, as the sparse query asks;
- increases: what warm instant cycles derive from the per-step totals
  (observer.prometheus.memory,
  stepped through the chunk); at the replay's first step, a cold start,
  `sum by (UUID, GPU_I_ID) (increase(counter[w]))`, error counters only where > 0;
- XID counts whose own sample is as new as their GPU's (dcgm-exporter drops an emptied window).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from observer.fleet.catalog import (
    LABEL_HOSTNAME,
    LABEL_HOSTNAME_NEW,
    LABEL_MIG_INSTANCE,
    LABEL_POD,
    LABEL_UUID,
    LABEL_XID,
    XID_COUNT_METRIC,
    canonical_name,
    xid_count_column,
)
from observer.fleet.model import BoolArray, FloatArray
from observer.prometheus.memory import CounterMemory
from observer.prometheus.plan import IDENTITY_LABELS, SPARSE_COUNTERS
from observer.prometheus.replay.groups import codes, reduce_rows
from observer.prometheus.replay.matrix import RawBlock
from observer.prometheus.replay.step_grid import IndexGrid, increase, pick

IdentityTuple = tuple[str, ...]
"""An identity row's labels, in IDENTITY_LABELS order ("" for absent)."""
_UUID = IDENTITY_LABELS.index(LABEL_UUID)
_MIG = IDENTITY_LABELS.index(LABEL_MIG_INSTANCE)
_POD = IDENTITY_LABELS.index(LABEL_POD)
_HOST = IDENTITY_LABELS.index(LABEL_HOSTNAME)
_HOST_NEW = IDENTITY_LABELS.index(LABEL_HOSTNAME_NEW)


def key_of(uuid: str, mig: str) -> str:
    return f"{uuid}/{mig}" if mig else uuid


def host_of(row: IdentityTuple) -> str:
    return row[_HOST] or row[_HOST_NEW]


@dataclass(slots=True)
class RawMemory:
    """What earlier steps saw (observer.prometheus.memory's and
    observer.prometheus.memory's state,
    carried from chunk to chunk)."""

    window: float
    counters: CounterMemory
    gpus: dict[str, tuple[IdentityTuple, float]] = field(default_factory=dict)
    node_last: dict[str, float] = field(default_factory=dict)
    interval: float | None = None


@dataclass(frozen=True, slots=True)
class Timing:
    """How a chunk is evaluated: the steps and the server's selector semantics."""

    steps_ms: np.ndarray
    lookback_ms: int
    window_ms: int
    left_open: bool

    @property
    def times(self) -> FloatArray:
        return self.steps_ms / 1000.0


@dataclass(frozen=True, slots=True)
class Identity:
    rows: list[IdentityTuple]
    """Label-set universe: the chunk's, then those only memory knows."""
    row_key: np.ndarray
    row_stamp: FloatArray
    """(rows x steps) newest sample time; NaN where the label set is not current."""
    keys: list[str]
    key_index: dict[str, int]
    key_stamp: FloatArray
    """(keys x steps) the GPU's newest sample time (NaN: not current)."""
    multi: BoolArray
    """(keys x steps) more than one current label set (an old pod's series lingers)."""
    newest_pod: np.ndarray
    """(keys x steps) pod code of the newest label set (-1: none)."""
    pods: dict[str, int]
    vanished_row: np.ndarray
    """(keys x steps) the label set of a vanished GPU's row (-1: not vanished)."""
    hosts: list[str]
    node_last: FloatArray
    """(hosts x steps) newest sample time of any GPU of the node, ever (memory's `up_last`)."""


def identity(
    block: RawBlock, inv: Sequence[int], grid: IndexGrid, timing: Timing, memory: RawMemory
) -> Identity:
    """Identity rows, memory and vanished GPUs at every step from the inventory series `inv`
    of `block` (`grid`: their rows of the block's grid); updates `memory` to the last step."""
    own = [tuple(block.labels[i].get(name, "") for name in IDENTITY_LABELS) for i in inv]
    series_row, rows_l = codes(own)
    rows: list[IdentityTuple] = [r for r in rows_l if isinstance(r, tuple)]
    known = set(rows)
    for lab, _ in memory.gpus.values():  # GPUs only memory knows (vanished before the chunk)
        if lab not in known:
            known.add(lab)
            rows.append(lab)
    n_rows, k = len(rows), int(timing.steps_ms.shape[0])
    t = pick(block.t_ms, grid) / 1000.0
    row_stamp = np.full((n_rows, k), np.nan)
    row_stamp[: len(rows_l)] = reduce_rows(t, series_row, len(rows_l), "max")
    row_key_s = [key_of(r[_UUID], r[_MIG]) for r in rows]
    row_key, keys_l = codes(row_key_s)
    keys = [str(x) for x in keys_l]
    key_index = {key: i for i, key in enumerate(keys)}
    g = len(keys)
    key_stamp = reduce_rows(row_stamp, row_key, g, "max")
    current = ~np.isnan(row_stamp)
    n_current = reduce_rows(np.where(current, 1.0, np.nan), row_key, g, "sum")
    multi = np.nan_to_num(n_current) >= 2
    is_max = current & (row_stamp == key_stamp[row_key])
    cand = np.where(is_max, np.arange(n_rows, dtype=np.float64)[:, None], np.nan)
    best = np.nan_to_num(reduce_rows(cand, row_key, g, "max"), nan=-1).astype(np.int64)
    pod_code, pods_l = codes([r[_POD] for r in rows])
    pods = {str(p): i for i, p in enumerate(pods_l)}
    newest_pod = np.where(best >= 0, pod_code[np.maximum(best, 0)], -1)

    seen0 = np.full(g, np.nan)
    lab0 = np.full(g, -1, dtype=np.int64)
    row_at = {r: i for i, r in enumerate(rows)}
    for key, (lab, when) in memory.gpus.items():
        gi = key_index[key]
        seen0[gi], lab0[gi] = when, row_at[lab]
    seen = np.fmax.accumulate(np.concatenate([seen0[:, None], key_stamp], axis=1), axis=1)
    before, after = seen[:, :-1], seen[:, 1:]
    key_current = ~np.isnan(key_stamp)
    update = key_current & ((key_stamp >= before) | np.isnan(before))
    last = np.maximum.accumulate(np.where(update, np.arange(k), -1), axis=1)
    label = np.where(last >= 0, best[np.arange(g)[:, None], np.maximum(last, 0)], lab0[:, None])
    window = memory.window
    alive = after >= timing.times[None, :] - window  # NaN compares False
    vanished_row = np.where(~key_current & alive & (label >= 0), label, -1)

    host_s = [host_of(r) for r in rows]
    host_code, hosts_l = codes([*host_s, *memory.node_last])
    hosts = [str(h) for h in hosts_l]
    node0 = np.full(len(hosts), np.nan)
    for i, h in enumerate(hosts):
        node0[i] = memory.node_last.get(h, np.nan)
    real = np.asarray([bool(h) for h in host_s], dtype=bool)
    per_host = reduce_rows(row_stamp[real], host_code[:n_rows][real], len(hosts), "max")
    node_last = np.fmax.accumulate(np.concatenate([node0[:, None], per_host], axis=1), axis=1)
    node_last = node_last[:, 1:]

    memory.gpus = {
        keys[i]: (rows[int(label[i, -1])], float(after[i, -1]))
        for i in np.flatnonzero(alive[:, -1] & (label[:, -1] >= 0)).tolist()
    } if k else memory.gpus  # fmt: skip
    if k:
        memory.node_last = {
            h: float(v) for h, v in zip(hosts, node_last[:, -1].tolist(), strict=True) if v == v
        }
    return Identity(rows, row_key, row_stamp, keys, key_index, key_stamp, multi, newest_pod,
                    pods, vanished_row, hosts, node_last)  # fmt: skip


def _series_keys(block: RawBlock, ident: Identity) -> np.ndarray:
    return np.fromiter(
        (ident.key_index.get(key_of(m.get(LABEL_UUID, ""), m.get(LABEL_MIG_INSTANCE, "")), -1)
         for m in block.labels),
        np.int64, len(block),
    )  # fmt: skip


def series_keys(block: RawBlock, ident: Identity) -> np.ndarray:
    """Per series, its GPU key's row in `ident` (-1: a GPU no identity row names)."""
    return _series_keys(block, ident)


def values(
    block: RawBlock, grid: IndexGrid, ident: Identity, key: np.ndarray
) -> dict[str, FloatArray]:
    """Family -> (keys x steps) value, each GPU's newest pod's series only (max over the
    series of one pod, as `max by (__name__, UUID, GPU_I_ID, pod)`); `key`: series_keys."""
    names = [m.get("__name__", "") for m in block.labels]
    canonical = {n: canonical_name(n) for n in set(names)}  # a few names, many series
    fam_code, fams_l = codes(list(map(canonical.__getitem__, names)))
    fams = [str(f) for f in fams_l]
    ok = np.flatnonzero(key >= 0)
    key = key[ok]
    val = pick(block.values, grid[ok])
    sparse = np.fromiter((names[i] in SPARSE_COUNTERS for i in ok.tolist()), bool, ok.size)
    val[sparse] = np.where(val[sparse] > 0, val[sparse], np.nan)  # `{sparse} > 0`
    lingering = ident.multi[key].any(axis=1)  # series of GPUs that had two pods this chunk
    if lingering.any():
        rows = np.flatnonzero(lingering)
        pod = np.fromiter((ident.pods.get(block.labels[ok[i]].get(LABEL_POD, ""), -2)
                           for i in rows.tolist()), np.int64, rows.size)  # fmt: skip
        kk = key[rows]
        keep = ~ident.multi[kk] | (pod[:, None] == ident.newest_pod[kk])
        val[rows] = np.where(keep, val[rows], np.nan)
    g = len(ident.keys)
    flat = reduce_rows(val, fam_code[ok] * g + key, len(fams) * g, "max")
    return {f: flat[i * g : (i + 1) * g] for i, f in enumerate(fams)}


def increases(
    block: RawBlock,
    ident: Identity,
    timing: Timing,
    key: np.ndarray,
    values: Mapping[str, FloatArray],
    present: frozenset[str],
    sparse_ok: bool,
    memory: RawMemory,
) -> tuple[dict[str, FloatArray], dict[str, FloatArray]]:
    """Counter family -> (keys x steps) increase, and the seconds each covers (its span), as
    warm instant cycles at those steps derive them from their totals
    (observer.prometheus.memory:
    `memory.counters`, stepped through the chunk and carried to the next). The replay's first
    step is a cold start: there the increase is `sum by (UUID, GPU_I_ID) (increase(x[w]))`
    (error counters only where > 0, 0 for the other reporting GPUs), which seeds the memory.
    `values`: the chunk's value grids (error counters only where non-zero: the sparse answer;
    with `sparse_ok`, a reporting GPU without one is absent from a complete answer, which the
    memory reads as the instant cycle's does, observer.prometheus.memory.feed)."""
    counters = memory.counters
    fams = counters.families
    g, k = len(ident.keys), int(timing.steps_ms.shape[0])
    current = ~np.isnan(ident.key_stamp)
    totals = np.full((k, len(fams), g), np.nan)
    absent = np.zeros((k, len(fams), g), dtype=bool)
    reported: set[int] = set()
    complete: list[int] = []
    for f, name in enumerate(fams):
        grid = values.get(name)
        if name in SPARSE_COUNTERS and name in present and sparse_ok:
            if grid is not None:
                with np.errstate(invalid="ignore"):
                    totals[:, f, :] = np.where(grid > 0, grid, np.nan).T
            absent[:, f, :] = (current & ~(totals[:, f, :].T > 0)).T
            reported.add(f)
            complete.append(f)
        elif grid is not None:
            totals[:, f, :] = grid.T
            reported.add(f)
    out = np.full((k, len(fams), g), np.nan)
    span = np.full((k, len(fams), g), counters.window)
    times = timing.times
    first = 0
    if counters.last_t is None and k:  # the replay's first step: a cold start
        cold = _prometheus_increase(block, ident, timing, key, fams)
        for f in complete:  # as the instant cycle fills the sparse `increase` answer
            cold[f] = np.where(current[:, 0] & np.isnan(cold[f]), 0.0, cold[f])
        out[0] = cold
        reported.update(np.flatnonzero(~np.isnan(cold).all(axis=1)).tolist())
        counters.seed(ident.keys, totals[0], ident.key_stamp[:, 0], float(times[0]), cold,
                      absent[0])  # fmt: skip
        first = 1
    if first < k:
        cols = counters.columns(ident.keys)
        stamps = np.ascontiguousarray(ident.key_stamp.T)
        for j in range(first, k):
            out[j], span[j] = counters.observe(cols, totals[j], stamps[j], float(times[j]),
                                               absent[j])  # fmt: skip
        counters.compact(float(times[-1]))
    return (
        {fams[f]: out[:, f, :].T for f in sorted(reported)},
        {fams[f]: span[:, f, :].T for f in sorted(reported)},
    )


def _prometheus_increase(
    block: RawBlock, ident: Identity, timing: Timing, key: np.ndarray, fams: Sequence[str]
) -> FloatArray:
    """(families x keys) `sum by (UUID, GPU_I_ID) (increase(x[w]))` at the chunk's first step,
    error counters only where > 0 (NaN elsewhere)."""
    at = {f: i for i, f in enumerate(fams)}
    fam = np.fromiter((at.get(m.get("__name__", ""), -1) for m in block.labels), np.int64,
                      len(block))  # fmt: skip
    idx = np.flatnonzero((fam >= 0) & (key >= 0))
    inc = increase(block.take(idx), timing.steps_ms[:1], timing.window_ms, timing.left_open)
    g = len(ident.keys)
    flat = reduce_rows(inc, fam[idx] * g + key[idx], len(fams) * g, "sum")[:, 0]
    out = flat.reshape(len(fams), g)
    with np.errstate(invalid="ignore"):
        for i, name in enumerate(fams):
            if name in SPARSE_COUNTERS:
                out[i] = np.where(out[i] > 0, out[i], np.nan)
    return out


def xid_counts(block: RawBlock, grid: IndexGrid, ident: Identity) -> dict[str, FloatArray]:
    """Snapshot column -> (keys x steps): each code's XID count (`xid_count_column`; a code
    seen by several series of one GPU, one per pod sharing it, counts once) and the GPU's total
    (`XID_COUNT_METRIC`), over the series whose own sample is as new as the GPU's newest (older
    ones belong to an emptied window); NaN where none."""
    key = _series_keys(block, ident)
    ok = key >= 0
    val = pick(block.values, grid)[ok]
    own = (pick(block.t_ms, grid) / 1000.0)[ok]
    fresh = own >= ident.key_stamp[key[ok]]
    code_of, code_names = codes([m.get(LABEL_XID, "") for m in block.labels])
    n_codes = max(1, len(code_names))
    g = len(ident.keys)
    group = key[ok] * n_codes + code_of[ok]
    per = reduce_rows(np.where(fresh, val, np.nan), group, g * n_codes, "max")
    per = per.reshape(g, n_codes, per.shape[1])  # g may be 0: a chunk before any GPU reported
    with np.errstate(invalid="ignore"):
        seen = ~np.isnan(per).all(axis=1)
        out = {XID_COUNT_METRIC: np.where(seen, np.nansum(per, axis=1), np.nan)}
    for i, code in enumerate(code_names):
        if code:
            out[xid_count_column(str(code))] = per[:, i, :]
    return out


@dataclass(frozen=True, slots=True)
class PodSteps:
    """`training_steps_total` per (namespace, pod): max value and summed increase."""

    namespace: np.ndarray
    pod: np.ndarray
    value: FloatArray
    increase: FloatArray


def pod_steps(block: RawBlock, grid: IndexGrid, timing: Timing) -> PodSteps:
    pairs = [(m.get("namespace", ""), m.get(LABEL_POD, "")) for m in block.labels]
    group, uniq = codes(pairs)
    n = len(uniq)
    ns = np.empty(n, dtype=object)
    pod = np.empty(n, dtype=object)
    ns[:] = [str(p[0]) for p in uniq if isinstance(p, tuple)]
    pod[:] = [str(p[1]) for p in uniq if isinstance(p, tuple)]
    value = reduce_rows(pick(block.values, grid), group, n, "max")
    inc = increase(block, timing.steps_ms, timing.window_ms, timing.left_open)
    return PodSteps(ns, pod, value, reduce_rows(inc, group, n, "sum"))


def present_vector(
    block: RawBlock, grid: IndexGrid, k: int, only: float | None = None
) -> list[dict[str, object]]:
    """The instant vector of a raw selector at step k (`only`: keep that value, `== 1`)."""
    col = grid[:, k]
    out: list[dict[str, object]] = []
    for i in np.flatnonzero(col >= 0).tolist():
        v = float(block.values[col[i]])
        if only is None or v == only:
            out.append({"metric": block.labels[i], "value": [0, repr(v)]})
    return out


def signature(block: RawBlock, grid: IndexGrid, k: int) -> tuple[bytes, bytes]:
    """What the vector at step k holds (which series, their values): equal -> same vector."""
    col = grid[:, k]
    return (col >= 0).tobytes(), pick(block.values, col).tobytes()


def split_by_name(block: RawBlock, names: frozenset[str]) -> RawBlock:
    idx = [i for i, m in enumerate(block.labels) if m.get("__name__", "") in names]
    return block.take(idx)
