"""The disruption controller and the eviction check: what makes a drain wait on a budget.

A PodDisruptionBudget's status counts the healthy (Ready) pods it selects against the pods it
expects; an eviction may proceed only while `disruptionsAllowed` > 0. This is what turns a
second eviction of the same training job into HTTP 429 until the first replacement is Ready —
the behaviour that makes drains hang forever without a timeout (kubectl #172).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from simulator.kube_api.object_store import ObjectStore

Obj = dict[str, Any]
TERMINAL = ("Succeeded", "Failed")
EVICTION_BLOCKED = "Cannot evict pod as it would violate the pod's disruption budget."


class TooManyRequests(Exception):
    """The eviction would violate a PodDisruptionBudget (HTTP 429)."""

    def __init__(self, message: str, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


class Invalid(Exception):
    """An eviction the API refuses outright (the real server answers 500 for several PDBs)."""


def is_ready(pod: Obj) -> bool:
    if pod.get("status", {}).get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
        return False
    conds = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _selects(pdb: Obj, pod: Obj) -> bool:
    """policy/v1 selection: matchLabels and matchExpressions; a null or empty selector selects
    no pod (it selected every pod in policy/v1beta1)."""
    sel = pdb["spec"].get("selector") or {}
    wanted, exprs = sel.get("matchLabels") or {}, sel.get("matchExpressions") or []
    if not wanted and not exprs:
        return False
    labels = pod["metadata"].get("labels") or {}
    if not all(labels.get(k) == v for k, v in wanted.items()):
        return False
    for e in exprs:
        op, key, values = e.get("operator"), e.get("key"), set(e.get("values") or ())
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def scaled(value: int | str, total: int) -> int:
    """An int-or-percent budget against `total` pods, rounded up as the disruption controller
    does (intstr.GetScaledValueFromIntOrPercent with roundUp)."""
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


def _status(pdb: Obj, matching: list[Obj], replicas: Mapping[str, int]) -> Obj:
    ns = pdb["metadata"]["namespace"]
    expected = max(len(matching), replicas.get(f"{ns}/{pdb['metadata']['name']}", 0))
    healthy = sum(1 for p in matching if is_ready(p))
    if "minAvailable" in pdb["spec"]:
        desired = scaled(pdb["spec"]["minAvailable"], expected)
    else:
        desired = max(0, expected - scaled(pdb["spec"].get("maxUnavailable", 0), expected))
    return {
        "observedGeneration": pdb["metadata"].get("generation", 1),
        "disruptionsAllowed": max(0, healthy - desired),
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
    }


def pdb_status(store: ObjectStore, pdb: Obj, replicas: Mapping[str, int]) -> Obj:
    """The status the disruption controller would write (`replicas`: ns/name -> job scale)."""
    _, pods = store.objects("pods", pdb["metadata"]["namespace"])
    return _status(pdb, [p for p in pods if _selects(pdb, p)], replicas)


def refresh_pdbs(
    store: ObjectStore,
    replicas: Mapping[str, int],
    observed: Callable[[Obj], bool] = lambda _pdb: True,
) -> None:
    """Write changed PDB statuses (call under the store lock); one pass over the pods.
    `observed(pdb)` False: the controller has not processed this generation yet."""
    _, pdbs = store.objects("poddisruptionbudgets")
    if not pdbs:
        return
    by_label: dict[tuple[str, str, str], list[Obj]] = {}
    _, pods = store.objects("pods")
    for p in pods:
        ns = p["metadata"]["namespace"]
        for k, v in (p["metadata"].get("labels") or {}).items():
            by_label.setdefault((ns, k, v), []).append(p)
    for pdb in pdbs:
        if not observed(pdb):
            continue
        wanted = (pdb["spec"].get("selector") or {}).get("matchLabels") or {}
        if wanted:  # candidates: the pods with the first required label, then the full test
            k, v = next(iter(wanted.items()))
            candidates = by_label.get((pdb["metadata"]["namespace"], k, v), [])
            matching = [p for p in candidates if _selects(pdb, p)]
        else:
            ns = pdb["metadata"]["namespace"]
            matching = [p for p in pods if p["metadata"]["namespace"] == ns and _selects(pdb, p)]
        status = _status(pdb, matching, replicas)
        if status != pdb.get("status"):
            store.put("poddisruptionbudgets", {**pdb, "status": status})


def check_eviction(store: ObjectStore, pod: Obj, replicas: Mapping[str, int]) -> None:
    """Raise TooManyRequests (429) or Invalid (500) when the eviction API would refuse `pod`.

    As in the real API: terminal and Pending pods may always go; a Ready pod needs a disruption
    allowed; a Running-but-not-Ready pod may go while the budget is currently met.
    """
    _, pdbs = store.objects("poddisruptionbudgets", pod["metadata"]["namespace"])
    matching = [b for b in pdbs if _selects(b, pod)]
    if len(matching) > 1:
        raise Invalid(
            "This pod has more than one PodDisruptionBudget, which the eviction subresource "
            "does not support."
        )
    phase = pod["status"].get("phase")
    if not matching or phase in TERMINAL or phase == "Pending":
        return
    pdb = matching[0]
    seen = (pdb.get("status") or {}).get("observedGeneration", 0)
    if seen < pdb["metadata"].get("generation", 1):
        raise TooManyRequests(
            EVICTION_BLOCKED,
            f"The disruption budget {pdb['metadata']['name']} is still being processed by the "
            "server.",
        )
    st = pdb_status(store, pdb, replicas)
    if is_ready(pod):
        allowed = st["disruptionsAllowed"] > 0
    elif pdb["spec"].get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
        allowed = True  # a not-ready pod may always go
    else:  # IfHealthyBudget, the default
        allowed = st["currentHealthy"] >= st["desiredHealthy"]
    if not allowed:
        raise TooManyRequests(
            EVICTION_BLOCKED,
            f"The disruption budget {pdb['metadata']['name']} needs {st['desiredHealthy']} "
            f"healthy pods and has {st['currentHealthy']} currently",
        )
