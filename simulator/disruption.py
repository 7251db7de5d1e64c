"""The disruption controller and the eviction check: what makes a drain wait on a budget.

A PodDisruptionBudget's status counts the healthy (Ready) pods it selects against the pods it
expects; an eviction may proceed only while `disruptionsAllowed` > 0. This is what turns a
second eviction of the same training job into HTTP 429 until the first replacement is Ready —
the behaviour that makes drains hang forever without a timeout (kubectl #172).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simulator.kube_api.store import ObjectStore

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
    labels = pod["metadata"].get("labels") or {}
    wanted = pdb["spec"].get("selector", {}).get("matchLabels") or {}
    return all(labels.get(k) == v for k, v in wanted.items())


def _status(pdb: Obj, matching: list[Obj], replicas: Mapping[str, int]) -> Obj:
    ns = pdb["metadata"]["namespace"]
    expected = max(len(matching), replicas.get(f"{ns}/{pdb['metadata']['name']}", 0))
    healthy = sum(1 for p in matching if is_ready(p))
    if "minAvailable" in pdb["spec"]:
        desired = int(pdb["spec"]["minAvailable"])
    else:
        desired = max(0, expected - int(pdb["spec"].get("maxUnavailable", 0)))
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


def refresh_pdbs(store: ObjectStore, replicas: Mapping[str, int]) -> None:
    """Write changed PDB statuses (call under the store lock); one pass over the pods."""
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
        wanted = pdb["spec"].get("selector", {}).get("matchLabels") or {}
        if wanted:  # candidates: the pods with the first required label, then the full test
            k, v = next(iter(wanted.items()))
            candidates = by_label.get((pdb["metadata"]["namespace"], k, v), [])
            matching = [p for p in candidates if _selects(pdb, p)]
        else:
            matching = [
                p for p in pods if p["metadata"]["namespace"] == pdb["metadata"]["namespace"]
            ]
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
    st = pdb_status(store, pdb, replicas)
    if is_ready(pod):
        allowed = st["disruptionsAllowed"] > 0
    else:
        allowed = st["currentHealthy"] >= st["desiredHealthy"]
    if not allowed:
        raise TooManyRequests(
            EVICTION_BLOCKED,
            f"The disruption budget {pdb['metadata']['name']} needs {st['desiredHealthy']} "
            f"healthy pods and has {st['currentHealthy']} currently",
        )
