"""GPU rows: from identity rows (as collected) to the snapshot's canonical GPU order and nodes.

Separate from the builder because it is the part that must stay vectorised at 100k GPUs: it
deduplicates identity rows (newest wins), joins GPUs to nodes by hostname (creating nodes that
Kubernetes does not know), sorts GPUs by (node, `gpu` index, MIG instance), and maps any metric
series - keyed by UUID or by identity row - to GPU positions.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from observer.fleet.columns import (
    BLOCK,
    Positions,
    factorize,
    first_occurrence,
    lookup,
    newest_per_position,
    readonly,
    same_keys,
)
from observer.fleet.model import NO_INDEX, GpuTable, IntArray, Node, NodeName, StrArray
from observer.snapshot.inputs import GpuColumns, MetricSeries, gpu_keys, str_column

NO_HOSTNAME = "<no-hostname>"
"""Node name for GPUs whose series carry neither `Hostname` nor `hostname` (not a valid
Kubernetes name, so it cannot collide with a real node)."""

SEEN_KEYS = 32
"""Key columns whose positions one `GpuRows` remembers (one per metric's series order)."""


@dataclass(slots=True)
class GpuRows:
    """Identity rows resolved to GPUs in canonical order (internal to one build)."""

    source: GpuColumns
    keys: StrArray
    """Row key per identity row (`UUID` or `UUID/GPU_I_ID`)."""
    gpu_rows: IntArray
    """Per GPU (canonical order): the identity row it was built from."""
    node_index: IntArray
    nodes: tuple[Node, ...]
    duplicate_rows: int
    group: Positions
    """Per identity row, the first row with the same key (the key's id)."""
    key_to_group: dict[str, int]
    """Row key -> its id (first row)."""
    _gpu_of_group: IntArray | None = None
    _row_to_gpu: IntArray | None = None
    _seen: list[tuple[StrArray, IntArray]] = field(default_factory=list)

    @property
    def count(self) -> int:
        return int(self.gpu_rows.shape[0])

    def gpu_of_group(self) -> IntArray:
        """GPU position per key id (indexed by row; rows that are not ids: NO_INDEX)."""
        if self._gpu_of_group is None:
            out = np.full(len(self.keys), NO_INDEX, dtype=np.int32)
            out[self.group[self.gpu_rows]] = np.arange(self.count, dtype=np.int32)
            self._gpu_of_group = out
        return self._gpu_of_group

    def row_to_gpu(self) -> IntArray:
        """GPU position of every identity row (duplicates map to their kept GPU)."""
        if self._row_to_gpu is None:
            self._row_to_gpu = self.gpu_of_group()[self.group]
        return self._row_to_gpu

    def lookup(self, keys: StrArray) -> IntArray:
        """GPU position per key by hashing (NO_INDEX for keys not among the identity rows)."""
        groups = lookup(keys, self.key_to_group)
        if not self.key_to_group:
            return groups  # all NO_INDEX
        return np.where(groups >= 0, self.gpu_of_group()[groups], NO_INDEX).astype(np.int32)

    def positions(self, series: MetricSeries) -> IntArray:
        """GPU position of each series, NO_INDEX for GPUs not among the identity rows."""
        if series.row is not None:
            rows = np.asarray(series.row, dtype=np.intp)
            ok = (rows >= 0) & (rows < len(self.keys))
            pos = np.full(rows.shape[0], NO_INDEX, dtype=np.int32)
            pos[ok] = self.row_to_gpu()[rows[ok]]
            return pos
        assert series.uuid is not None
        keys = gpu_keys(series.uuid, series.mig_instance)
        if same_keys(keys, self.keys):
            return self.row_to_gpu()
        for seen_keys, seen_pos in self._seen:
            if same_keys(keys, seen_keys):
                return seen_pos
        pos = self._block_lookup(keys)
        if len(self._seen) >= SEEN_KEYS:  # rows reused by a structure cache meet many
            self._seen.clear()
        self._seen.append((keys, pos))
        return pos

    def _block_lookup(self, keys: StrArray) -> IntArray:
        """Positions of keys that mostly follow the identity rows' order with a few gaps (a
        metric missing on some GPUs): hash one key per block, compare whole blocks against the
        identity rows vectorised, and hash individually only keys in blocks that do not line up.
        Keys in any other order cost one full hash lookup plus a few vectorised passes."""
        m, n = len(keys), len(self.keys)
        if m == 0 or n == 0:
            return self.lookup(keys)
        heads = np.arange(0, m, BLOCK)
        head_row = lookup(keys[heads], self.key_to_group)
        head_row[head_row < 0] = -n - BLOCK
        tails = np.minimum(heads + BLOCK - 1, m - 1)  # do blocks line up at all? (cheap probe)
        tail_row = head_row + (tails - heads)
        lined_up = (tail_row >= 0) & (tail_row < n)
        lined_up[lined_up] = self.keys[tail_row[lined_up]] == keys[tails[lined_up]]
        if np.count_nonzero(lined_up) < heads.size // 2:
            return self.lookup(keys)
        block = np.arange(m) // BLOCK
        cand = head_row[block] + (np.arange(m) - heads[block])
        ok = (cand >= 0) & (cand < n)
        cand[~ok] = 0
        ok &= self.keys[cand] == keys
        pos = np.where(ok, self.gpu_of_group()[self.group[cand]], NO_INDEX).astype(np.int32)
        miss = np.flatnonzero(~ok)
        if miss.size:
            pos[miss] = self.lookup(keys[miss])
        return pos

    def _column(self, col: StrArray | None) -> StrArray:
        if col is None:
            return readonly(np.full(self.count, "", dtype=object))
        return readonly(col[self.gpu_rows])

    def pod_labels(self) -> tuple[StrArray, StrArray, StrArray]:
        """(namespace, pod, node name) per GPU, canonical order."""
        names = np.array([n.name for n in self.nodes], dtype=object)
        host = names[self.node_index] if self.count else np.zeros(0, dtype=object)
        return self._column(self.source.namespace), self._column(self.source.pod), host

    def table(self, pod_index: IntArray, job_index: IntArray) -> GpuTable:
        src = self.source
        model_codes, model_names = factorize(src.model_name[self.gpu_rows])
        order = sorted(range(len(model_names)), key=model_names.__getitem__)
        remap = np.empty(len(order), dtype=np.int32)
        remap[order] = np.arange(len(order), dtype=np.int32)
        return GpuTable(
            uuid=self._column(src.uuid),
            node_index=readonly(self.node_index),
            device_index=readonly(src.device_index[self.gpu_rows].astype(np.int32)),
            model_index=readonly(remap[model_codes] if len(order) else model_codes),
            models=tuple(model_names[i] for i in order),
            pod_index=pod_index,
            job_index=job_index,
            mig_instance=self._column(src.mig_instance),
            mig_profile=self._column(src.mig_profile),
            pci_bus_id=self._column(src.pci_bus_id),
        )


def resolve_gpu_rows(
    gpus: GpuColumns,
    k8s_nodes: Sequence[Node],
    extra_node_names: Collection[str] = (),
    join: Mapping[str, str] | None = None,
) -> GpuRows:
    """Dedupe identity rows, join to nodes, and order GPUs canonically. `join`: hostname ->
    the Kubernetes node it joined, where they differ (observer.snapshot.node_join)."""
    keys = gpus.mig_keys()
    n = len(keys)
    group, key_to_group = first_occurrence(keys)
    if len(key_to_group) < n:  # duplicate rows: keep the newest of each key (ties: the later)
        stamp = gpus.timestamp if gpus.timestamp is not None else np.zeros(n)
        kept, _, _ = newest_per_position(group, stamp)
        kept.sort()  # first-seen order of identity rows, so runs of one node stay together
    else:
        kept = np.arange(n)
    host = gpus.hostname[kept]
    if host.size and (host == "").any():
        host = np.where(host == "", NO_HOSTNAME, host)
    if join and host.size:
        codes, names = factorize(host)
        host = str_column([join.get(str(h), str(h)) for h in names])[codes]
    host_code, hostnames = factorize(host)
    by_name = {str(nd.name): nd for nd in k8s_nodes}
    names = sorted(set(by_name) | set(hostnames) | set(extra_node_names))
    nodes = tuple(by_name.get(x) or Node(NodeName(x), in_kubernetes=False) for x in names)
    node_pos = {x: i for i, x in enumerate(names)}
    host_node = np.array([node_pos[h] for h in hostnames], dtype=np.int32)
    node_of_kept = host_node[host_code] if kept.size else np.zeros(0, dtype=np.int32)
    sort_keys: list[np.ndarray] = [gpus.device_index[kept], node_of_kept]
    if gpus.mig_instance is not None:
        mig = gpus.mig_instance[kept]
        if (mig != "").any():
            sort_keys.insert(0, _mig_order(mig))
    order = np.lexsort(sort_keys)
    return GpuRows(
        source=gpus,
        keys=keys,
        gpu_rows=kept[order].astype(np.int32),
        node_index=node_of_kept[order].astype(np.int32),
        nodes=nodes,
        duplicate_rows=n - len(kept),
        group=group,
        key_to_group=key_to_group,
    )


def _mig_order(mig: StrArray) -> IntArray:
    """Sort rank of `GPU_I_ID` values: whole GPU first, then numerically."""
    codes, values = factorize(mig)

    def key(v: str) -> tuple[int, int, str]:
        if v == "":
            return (0, 0, v)
        return (1, int(v), v) if v.isdigit() else (2, 0, v)

    order = sorted(range(len(values)), key=lambda i: key(values[i]))
    rank = np.empty(len(values), dtype=np.int32)
    rank[order] = np.arange(len(values), dtype=np.int32)
    return rank[codes]
