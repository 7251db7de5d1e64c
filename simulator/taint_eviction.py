"""When the taint manager evicts a pod from a node with NoExecute taints.

A pod that does not tolerate every NoExecute taint leaves at once; one that tolerates them all
stays until the smallest `tolerationSeconds` of the tolerations used has passed since the taint
was added (the 300 s default for `not-ready`/`unreachable` included), or for ever when none of
them sets a limit (kubernetes' `getMinTolerationTime`). Times are fleet (wall) time.
"""

from __future__ import annotations

from typing import Any

from simulator.controller import matching_toleration
from simulator.kube_api.objects import parse_rfc3339

Obj = dict[str, Any]


def _wall(ts: str | None, default: float) -> float:
    t = parse_rfc3339(ts)
    return default if t is None else t


def eviction_due(pod: Obj, taints: list[Obj], now: float) -> float | None:
    """The wall time the pod must leave by (`now` or earlier: at once), None: it may stay."""
    due: float | None = None
    for taint in taints:
        if taint.get("effect") != "NoExecute":
            continue
        used = matching_toleration(pod, taint)
        if used is None:
            return now
        seconds = used.get("tolerationSeconds")
        if seconds is None:
            continue
        start = max(
            _wall(taint.get("timeAdded"), now), _wall(pod["metadata"].get("creationTimestamp"), 0.0)
        )
        at = start + max(0.0, float(seconds))
        due = at if due is None else min(due, at)
    return due
