"""Where each group's rows sit, for the padded group sorts of `detectors.signals.sorted_groups`,
remembered for the group ids it was computed from.

A layout depends on nothing but the group ids (a GPU's job, node-mates, model, peer group), and
those are the same from one cycle to the next unless the fleet changed; a cycle asks for a
dozen group medians over a handful of groupings. Computing a layout (a radix sort of the ids,
sizes, the padded index matrices) is most of a group median's cost at 1k-10k GPUs, where the
sorts themselves are small. The last few layouts are kept with a copy of their ids and handed
back when the ids are equal, element for element: the same layout, so the same medians.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from observer.fleet.model import NO_INDEX

Ints = npt.NDArray[np.signedinteger[Any]]
Index = npt.NDArray[np.intp]

PADDED_UP_TO = 4096
"""Groups up to this size are sorted as rows of a padded matrix; larger ones one by one."""

KEPT = 12
"""Layouts remembered: more than the distinct groupings one suite cycle asks for."""


@dataclass(frozen=True, slots=True)
class GroupLayout:
    """Per block of groups: their ids and, per group, the rows holding its values along one
    padded row (index `n`, one past the last row, stands for padding)."""

    blocks: tuple[tuple[Index, Index], ...]


def _frozen(a: npt.NDArray[Any]) -> Index:
    out: Index = np.asarray(a, dtype=np.intp)
    out.flags.writeable = False  # shared by every caller with these ids
    return out


def _build(groups: Ints, n_groups: int) -> GroupLayout:
    """Rows in group order once (a radix sort of the ids), one padded row per group (groups of
    similar size together, widths in powers of two), groups over PADDED_UP_TO one by one."""
    n = groups.shape[0]
    member = np.flatnonzero(groups != NO_INDEX)
    if member.size == 0 or n_groups == 0:
        return GroupLayout(())
    gm = groups[member]
    keys = gm.astype(np.uint16) if n_groups <= np.iinfo(np.uint16).max else gm
    rows = member[np.argsort(keys, kind="stable")]  # in group order
    size = np.bincount(gm, minlength=n_groups)
    start = np.concatenate(([0], np.cumsum(size)[:-1]))
    width = 1 << np.ceil(np.log2(np.clip(size, 8, None))).astype(np.int64)
    width[(size == 0) | (size > PADDED_UP_TO)] = 0
    blocks: list[tuple[Index, Index]] = []
    for w in np.unique(width[width > 0]):
        gids = np.flatnonzero(width == w)
        sz, j = size[gids][:, None], np.arange(w)[None, :]
        at = np.where(j < sz, rows[start[gids][:, None] + np.minimum(j, sz - 1)], n)
        blocks.append((_frozen(gids), _frozen(at)))
    for gid in np.flatnonzero(size > PADDED_UP_TO):
        mine = rows[start[gid] : start[gid] + size[gid]]
        blocks.append((_frozen(np.array([gid])), _frozen(mine[None, :])))
    return GroupLayout(tuple(blocks))


_lock = threading.Lock()
_kept: list[tuple[Ints, int, GroupLayout]] = []


def _same(kept: Ints, groups: Ints) -> bool:
    """Equal ids; a few spread-out ids are compared first, so most misses cost no full pass."""
    if kept.shape != groups.shape or kept.dtype != groups.dtype:
        return False
    step = max(1, groups.shape[0] // 32)
    if not np.array_equal(kept[::step], groups[::step]):
        return False
    return bool(np.array_equal(kept, groups))


def group_layout(groups: Ints, n_groups: int) -> GroupLayout:
    """The layout of `groups` (NO_INDEX rows left out), remembered for the next equal ids."""
    with _lock:
        kept = list(_kept)
    for ids, n, layout in kept:
        if n == n_groups and _same(ids, groups):
            return layout
    layout = _build(groups, n_groups)
    ids = groups.copy()  # the caller's array may change after this call; the copy never does
    with _lock:
        _kept.insert(0, (ids, n_groups, layout))
        del _kept[KEPT:]
    return layout
