"""Pods, jobs and ranks assigned to GPUs, and a cache of the last assignment.

Assigning pods to GPUs and pods to jobs with ranks (observer.snapshot.job_identity) is the snapshot
builder's costliest step per GPU-holding pod, and consecutive cycles (a live collector every 30 s,
or a backtest's thousands of replayed steps) nearly always hold the same pods on the same GPUs.
`PodAssignmentCache` remembers the last assignment with the exact inputs it came from (the pod
records and the per-GPU namespace, pod and node columns) and hands it back only when both are
equal: same inputs, same result, so a cached build is indistinguishable from a fresh one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from threading import Lock

import numpy as np

from observer.fleet.model import IntArray, Job, Pod, StrArray

PodAssignment = tuple[tuple[Pod, ...], tuple[Job, ...], IntArray, tuple[str, ...]]
"""(pod records in canonical order, jobs, pod index per GPU, pods synthesised from GPU labels)."""
PodLabels = tuple[StrArray, StrArray, StrArray]
"""(namespace, pod, node name) per GPU in canonical order: what the assignment reads of GPUs."""


@dataclass(frozen=True, slots=True)
class _Entry:
    pods: list[Pod]
    labels: PodLabels
    built: PodAssignment


class PodAssignmentCache:
    """The last pod assignment and its inputs (one entry: cycles come in time order)."""

    __slots__ = ("_last", "_lock", "hits", "misses")

    def __init__(self) -> None:
        self._last: _Entry | None = None
        self._lock = Lock()
        self.hits = 0
        self.misses = 0

    def assign(
        self, pods: list[Pod], labels: PodLabels, build: Callable[[], PodAssignment]
    ) -> PodAssignment:
        """The cached assignment when `pods` and `labels` equal the last inputs, else
        `build()`'s result, remembered for next time."""
        with self._lock:
            last = self._last
        if last is not None and _same(last, pods, labels):
            self.hits += 1
            return last.built
        built = build()
        self.misses += 1
        with self._lock:
            self._last = _Entry(list(pods), labels, built)
        return built


def _same(last: _Entry, pods: list[Pod], labels: PodLabels) -> bool:
    return (
        all(
            a.shape == b.shape and bool(np.array_equal(a, b))
            for a, b in zip(labels, last.labels, strict=True)
        )
        and last.pods == pods
    )


def attribute_by_node(labels: PodLabels, pods: Sequence[Pod]) -> PodLabels:
    """GPU rows' (namespace, pod) from Kubernetes when no DCGM series named a pod (the
    exporter's Kubernetes mapping off). Only where it is certain: a node whose running pods
    requesting GPUs are exactly one, and that pod requests every GPU row of the node (a
    whole-node training rank, the common case). Anything else stays unattributed rather than
    guessed; a GPU is never given to a pod that might not hold it."""
    ns, name, host = labels
    if len(name) == 0 or any(name.tolist()):
        return labels
    holders: dict[str, list[Pod]] = {}
    for p in pods:
        if p.node and p.gpus > 0 and p.phase == "Running":
            holders.setdefault(str(p.node), []).append(p)
    if not holders:
        return labels
    ns, name = ns.copy(), name.copy()
    for node, on_node in holders.items():
        rows = np.flatnonzero(host == node)
        if len(on_node) == 1 and on_node[0].gpus == rows.size:
            ns[rows], name[rows] = on_node[0].namespace, on_node[0].name
    return ns, name, host
