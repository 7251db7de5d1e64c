"""A Prometheus matrix answer (raw samples of range selectors) -> flat numpy arrays, fast.

A range replay fetches every raw sample of a chunk with instant queries on range selectors
(`{__name__=~"A|B"}[65m]`): millions of `[t,"v"]` pairs per answer. Decoding that with `json`
builds two Python objects per sample (seconds per chunk); here the body is cut at the series
boundaries instead, the label sets go through `json` in one call, and every number is parsed by
numpy in one pass. Anything unexpected falls back to `json`, so the result never depends on it.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from observer.fleet.model import FloatArray
from observer.prometheus.client import PARTIAL_WARNING, flagged_partial

_SERIES = b'{"metric":'
_VALUES = b',"values":'
_ROWS = bytes.maketrans(b"]", b"\n")


@dataclass(frozen=True, slots=True)
class RawBlock:
    """Series of raw samples: series i holds samples starts[i]:starts[i+1], oldest first."""

    labels: list[dict[str, str]]
    starts: np.ndarray
    """int64, len(labels) + 1."""
    t_ms: np.ndarray
    """Sample times, integer milliseconds (int64)."""
    values: FloatArray

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def samples(self) -> int:
        return int(self.t_ms.shape[0])

    def series_of_sample(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.labels)), np.diff(self.starts))

    def take(self, index: Sequence[int] | np.ndarray) -> RawBlock:
        """The given series (in that order), samples copied."""
        idx = np.asarray(index, dtype=np.intp)
        lens = np.diff(self.starts)[idx]
        starts = np.zeros(idx.size + 1, dtype=np.int64)
        np.cumsum(lens, out=starts[1:])
        pick = _ranges(self.starts[idx], lens)
        return RawBlock([self.labels[i] for i in idx.tolist()], starts, self.t_ms[pick],
                        self.values[pick])  # fmt: skip

    @staticmethod
    def concat(blocks: Sequence[RawBlock]) -> RawBlock:
        if not blocks:
            return empty_block()
        labels = [m for b in blocks for m in b.labels]
        lens = np.concatenate([np.diff(b.starts) for b in blocks])
        starts = np.zeros(lens.size + 1, dtype=np.int64)
        np.cumsum(lens, out=starts[1:])
        t_ms = np.concatenate([b.t_ms for b in blocks])
        return RawBlock(labels, starts, t_ms, np.concatenate([b.values for b in blocks]))


LabelKey = tuple[tuple[str, str], ...]
"""A label set as a hashable value (its items sorted): equal exactly when the dicts are."""


def label_keys(labels: Sequence[Mapping[str, str]]) -> list[LabelKey]:
    return [tuple(sorted(m.items())) for m in labels]


def carry(
    prev: RawBlock, since_ms: int, new: RawBlock, prev_keys: Sequence[LabelKey] | None = None
) -> tuple[RawBlock, list[LabelKey]]:
    """`new`, each series preceded by `prev`'s samples at or after `since_ms` (series only
    `prev` holds keep those): the next chunk's reach-back without fetching it again. `new`
    must start after `prev` ends. Also the result's label keys, in its series order: the next
    chunk's `prev_keys` (else they are derived from `prev.labels` again)."""
    keys = label_keys(new.labels)
    index: dict[LabelKey, int] = {}
    for k in keys:
        index.setdefault(k, len(index))
    labels = list(new.labels)
    lens_prev = np.diff(prev.starts)
    series_prev = np.repeat(np.arange(len(prev)), lens_prev)
    keep = prev.t_ms >= since_ms
    tail_len = np.bincount(series_prev[keep], minlength=len(prev))
    to = np.full(len(prev), -1, dtype=np.int64)
    old = label_keys(prev.labels) if prev_keys is None else prev_keys
    for i in np.flatnonzero(tail_len).tolist():
        k = old[i]
        j = index.get(k)
        if j is None:
            j = index[k] = len(labels)
            labels.append(prev.labels[i])
            keys.append(k)
        to[i] = j
    n = len(labels)
    lens_new = np.zeros(n, dtype=np.int64)
    lens_new[: len(new)] = np.diff(new.starts)
    tail_u = np.zeros(n, dtype=np.int64)
    has = to >= 0
    tail_u[to[has]] = tail_len[has]
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(tail_u + lens_new, out=starts[1:])
    total = int(starts[-1])
    t_ms = np.empty(total, dtype=np.int64)
    values = np.empty(total)
    kept = np.flatnonzero(keep)  # a series' kept samples are its last ones
    s_kept = series_prev[kept]
    rank = kept - (prev.starts[1:][s_kept] - tail_len[s_kept])
    dest = starts[to[s_kept]] + rank
    t_ms[dest], values[dest] = prev.t_ms[kept], prev.values[kept]
    s_new = new.series_of_sample()
    dest = starts[s_new] + tail_u[s_new] + (np.arange(new.samples) - new.starts[s_new])
    t_ms[dest], values[dest] = new.t_ms, new.values
    return RawBlock(labels, starts, t_ms, values), keys


def _ranges(first: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenated aranges first[i] .. first[i] + lens[i]."""
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.intp)
    offsets = np.repeat(first - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
    out: np.ndarray = (np.arange(total) + offsets).astype(np.intp)
    return out


def empty_block() -> RawBlock:
    return RawBlock([], np.zeros(1, dtype=np.int64), np.zeros(0, np.int64), np.zeros(0))


def from_series(result: Sequence[Mapping[str, Any]]) -> RawBlock:
    """From a decoded matrix (`[{"metric": {...}, "values": [[t, "v"], ...]}, ...]`)."""
    labels = [dict(s["metric"]) for s in result]
    lens = np.array([len(s["values"]) for s in result], dtype=np.int64)
    starts = np.zeros(len(result) + 1, dtype=np.int64)
    np.cumsum(lens, out=starts[1:])
    points = [p for s in result for p in s["values"]]
    t = np.fromiter((float(p[0]) for p in points), np.float64, len(points))
    v = np.fromiter((float(p[1]) for p in points), np.float64, len(points))
    return RawBlock(labels, starts, np.rint(t * 1000).astype(np.int64), v)


class MalformedAnswer(ValueError):
    pass


def parse_matrix(body: bytes) -> tuple[RawBlock, tuple[str, ...]]:
    """(series, warnings) of a successful `resultType: matrix` answer body."""
    head = body.find(b'"result":[')
    if not body.startswith(b'{"status":"success"') or head < 0:
        return _parse_json(body)
    if b'"resultType":"matrix"' not in body[: head + 1]:
        raise MalformedAnswer("resultType is not matrix")
    parts = body[head + 10 :].split(_SERIES)
    metric_txt: list[bytes] = []
    value_txt: list[bytes] = []
    counts: list[int] = []
    tail = parts[0] if len(parts) == 1 else b""
    for part in parts[1:]:
        cut = part.find(_VALUES)
        end = part.find(b"]]", cut)
        if cut < 0 or end < 0:
            return _parse_json(body)
        metric_txt.append(part[:cut])
        vals = part[cut + len(_VALUES) : end + 2]
        value_txt.append(vals)
        counts.append(vals.count(b"],[") + 1)
        tail = part[end + 2 :]
    labels: list[dict[str, str]] = json.loads(b"[" + b",".join(metric_txt) + b"]")
    lens = np.asarray(counts, dtype=np.int64)
    starts = np.zeros(lens.size + 1, dtype=np.int64)
    np.cumsum(lens, out=starts[1:])
    total = int(starts[-1])
    flat = _numbers(value_txt)
    if flat is None or flat.shape[0] != 2 * total:
        return _parse_json(body)
    t_ms = np.rint(flat[0::2] * 1000).astype(np.int64)
    flagged = flagged_partial(body[:head]) or flagged_partial(tail)  # either side of `data`
    partial = (PARTIAL_WARNING,) if flagged else ()
    return RawBlock(labels, starts, t_ms, flat[1::2].copy()), _warnings(tail) + partial


def _numbers(value_txt: list[bytes]) -> FloatArray | None:
    """Every `[t,"v"]` of the value arrays as t0, v0, t1, v1, ...: pandas' C CSV reader is 3x
    faster than numpy's text parser and gives the same doubles. Imported here, not at module
    load: only range replays parse raw samples, and importing pandas takes ~0.5 s."""
    import pandas  # type: ignore[import-untyped]

    if not value_txt:
        return np.zeros(0)
    rows = (b"," + b",".join(value_txt)).translate(_ROWS, b'["')  # ",t,v" per line
    try:
        frame = pandas.read_csv(io.BytesIO(rows), header=None, usecols=[1, 2],
                                dtype=np.float64, engine="c")  # fmt: skip
    except (ValueError, pandas.errors.ParserError):
        return None
    out: FloatArray = frame.to_numpy(dtype=np.float64).ravel()
    return out


def _warnings(tail: bytes) -> tuple[str, ...]:
    at = tail.find(b'"warnings":')
    if at < 0:
        return ()
    found, _ = json.JSONDecoder().raw_decode(tail[at + 11 :].decode())
    return tuple(str(w) for w in found)


def _parse_json(body: bytes) -> tuple[RawBlock, tuple[str, ...]]:
    try:
        doc = json.loads(body)
        data = doc["data"]
    except (ValueError, KeyError, TypeError) as exc:
        raise MalformedAnswer(f"malformed answer ({exc!r})") from None
    if data.get("resultType") != "matrix":
        raise MalformedAnswer(f"resultType {data.get('resultType')!r}, expected 'matrix'")
    warnings = tuple(str(w) for w in doc.get("warnings") or ())
    if doc.get("isPartial") is True:
        warnings += (PARTIAL_WARNING,)
    return from_series(data["result"]), warnings
