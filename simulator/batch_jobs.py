"""batch/v1 Jobs in the simulated cluster: the diagnostic Jobs gpufleet pins to a node.

A Job starts when it is first seen (status.active, startTime, and its pod Running on the pinned
node: simulator.job_pods) and completes `scenario.diagnostic_seconds` of scenario time later,
succeeded or failed as the scenario's `diagnostics` says for the node it is pinned to
(`spec.template.spec.nodeName`; unlisted nodes pass, a Job pinned to no existing node fails). A
Job whose command names GPUs (`dcgmi diag ... -i 2` or `-i 0,3`) takes its outcome from
`gpu_diagnostics` (`<node>/<index>`) for those GPUs, falling back to the node's; a node-wide Job
fails when any GPU of its node is listed as failing. Whatever the scenario says, the hardware has
the last word (simulator.repairs): a diagnostic fails on a GPU whose hard fault persists (DBEs
not yet reset, a failed row remap, a GPU fallen off the bus), and for a while after a repair it
may fail flakily (seeded). Status fields and conditions are shaped like the real Job
controller's (Complete/SuccessCriteriaMet, Failed/FailureTarget).

Repair Jobs (label `gpufleet.io/repair`) take `scenario.reset_seconds` instead, and their outcome
comes from the cluster's repairs (simulator.repairs): a GPU reset that finds the GPU in use fails
with the reason nvidia-smi gives. As on a real cluster, a failure's reason is in the Job pod's
termination message only (the Job's Failed condition says the backoff limit was reached); a
reboot sentinel Job leaves the sentinel file for the node's reboot daemon. A finished Job with
`ttlSecondsAfterFinished` is deleted that many scenario seconds after it finished, as the
TTL-after-finished controller does, and a Job's pod goes with its Job (the garbage collector).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Protocol

from simulator import job_pods
from simulator.kube_api import objects as ko
from simulator.kube_api.object_store import ObjectStore
from simulator.scenario import DiagResult, Scenario

Obj = dict[str, Any]
RESOURCE = "jobs"
DONE = "Reached expected number of succeeded pods"
REPAIR_LABEL = "gpufleet.io/repair"


class RepairHooks(Protocol):
    """What a repair Job does on its node (simulator.repairs.Repairs)."""

    def run(self, kind: str, node: str, labels: Mapping[str, str]) -> str | None:
        """Carry out repair `kind` on `node`: None when it worked, else why it failed."""
        ...

    def diagnose(self, node: str, gpus: list[int] | None, job: str) -> str | None:
        """Why `dcgmi diag` on these GPUs of `node` (None: all) fails by the hardware's state
        (a fault that persists, a flaky GPU after a repair), or None."""
        ...


def _node_of(job: Obj) -> str | None:
    spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    node = spec.get("nodeName")
    return str(node) if node else None


def _labels(job: Obj) -> dict[str, str]:
    return dict((job.get("metadata") or {}).get("labels") or {})


def gpu_indices(job: Obj) -> list[int] | None:
    """The GPUs `-i`/`--entity-id` names in the Job's first container command (None: all)."""
    spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = spec.get("containers") or [{}]
    cmd = [str(c) for c in containers[0].get("command") or ()]
    for flag in ("-i", "--entity-id"):
        if flag in cmd and cmd.index(flag) + 1 < len(cmd):
            ids = cmd[cmd.index(flag) + 1].split(",")
            return [int(i) for i in ids if i.strip().isdigit()]
    return None


def diag_result(scenario: Scenario, node: str, gpus: list[int] | None) -> DiagResult:
    """The scenario's outcome for a diagnostic on `node` (all GPUs, or `gpus`)."""
    own = scenario.diagnostics.get(node)
    per_gpu = {
        int(k.rpartition("/")[2]): v
        for k, v in scenario.gpu_diagnostics.items()
        if k.rpartition("/")[0] == node
    }
    if gpus is None:
        failing = any(v is DiagResult.FAIL for v in per_gpu.values())
        return own or (DiagResult.FAIL if failing else DiagResult.PASS)
    results = [per_gpu.get(g, own or DiagResult.PASS) for g in gpus]
    return DiagResult.FAIL if DiagResult.FAIL in results else DiagResult.PASS


def _condition(type_: str, reason: str, message: str, at: str) -> Obj:
    return {
        "type": type_,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": at,
        "lastTransitionTime": at,
    }


class BatchJobs:
    """Moves Jobs through active -> complete/failed on the scenario clock (called from tick)."""

    def __init__(
        self, store: ObjectStore, scenario: Scenario, repairs: RepairHooks | None = None
    ) -> None:
        self.store = store
        self.scenario = scenario
        self.repairs = repairs
        self._started: dict[tuple[str, str], float] = {}
        """(namespace, name) -> scenario time the Job started."""
        self._now = 0.0
        self._finished: dict[tuple[str, str], float] = {}
        """(namespace, name) -> scenario time the Job was first seen finished (for its TTL)."""

    def tick(self, now: float, wall: float) -> None:
        self._now = now
        if not self.store.count(RESOURCE) and not self._started:
            return
        _, jobs = self.store.objects(RESOURCE)
        live = set()
        for job in jobs:
            meta = job["metadata"]
            key = (str(meta.get("namespace", "")), str(meta["name"]))
            live.add(key)
            status = job.get("status") or {}
            if status.get("succeeded") or status.get("failed"):
                self._expire(job, key, now)
                continue
            if key not in self._started:
                self._started[key] = now
                self._write(job, {"active": 1, "startTime": ko.rfc3339(wall)})
                node = _node_of(job)
                if node is not None and self.store.get("nodes", "", node) is not None:
                    self.store.put("pods", job_pods.job_pod(job, ko.rfc3339(wall)))
                continue
            repair = _labels(job).get(REPAIR_LABEL)
            took = self.scenario.reset_seconds if repair else self.scenario.diagnostic_seconds
            if now - self._started[key] < took:
                continue
            self._finish(job, wall)
        for key in set(self._started) - live:
            del self._started[key]
        for key in set(self._finished) - live:
            del self._finished[key]
        self._collect_garbage()

    def _collect_garbage(self) -> None:
        """Delete Job pods whose Job is gone (background propagation, as gpufleet deletes)."""
        _, pods = self.store.objects("pods")
        for p in pods:
            owner = (p["metadata"].get("ownerReferences") or [{}])[0]
            ns = str(p["metadata"].get("namespace", ""))
            if owner.get("kind") != "Job":
                continue
            job = self.store.get(RESOURCE, ns, str(owner.get("name")))
            if job is None or job["metadata"].get("uid") != owner.get("uid"):
                self.store.delete("pods", ns, p["metadata"]["name"])

    def _expire(self, job: Obj, key: tuple[str, str], now: float) -> None:
        """The TTL-after-finished controller: a finished Job with `ttlSecondsAfterFinished` is
        deleted that long after it finished."""
        ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
        if ttl is None:
            return
        done = self._finished.setdefault(key, now)
        if now - done >= float(ttl):
            self.store.delete(RESOURCE, key[0], key[1])
            self._finished.pop(key, None)

    def _finish(self, job: Obj, wall: float) -> None:
        at = ko.rfc3339(wall)
        node = _node_of(job)
        exists = node is not None and self.store.get("nodes", "", node) is not None
        result = diag_result(self.scenario, node or "", gpu_indices(job))
        why = "diagnostics failed" if exists else f"node {node!r} does not exist"
        repair = _labels(job).get(REPAIR_LABEL)
        if repair and exists and node is not None:
            failed = self._repair(repair, node, job)
            result = DiagResult.FAIL if failed else DiagResult.PASS
            why = failed or ""
        elif exists and node is not None and self.repairs is not None:
            found = self.repairs.diagnose(node, gpu_indices(job), str(job["metadata"]["name"]))
            if found is not None:
                result, why = DiagResult.FAIL, found
        status: Obj = {"active": 0, "startTime": (job.get("status") or {}).get("startTime", at)}
        if exists and result is DiagResult.PASS:
            status.update(
                succeeded=1,
                completionTime=at,
                conditions=[
                    _condition(
                        "SuccessCriteriaMet",
                        "CompletionsReached",
                        "Reached expected number of succeeded pods",
                        at,
                    ),
                    _condition(
                        "Complete",
                        "CompletionsReached",
                        "Reached expected number of succeeded pods",
                        at,
                    ),
                ],
            )
        meta = job["metadata"]
        pod = self.store.get("pods", str(meta.get("namespace", "")), job_pods.pod_name(job))
        passed = exists and result is DiagResult.PASS
        if pod is not None:  # the container's words are in its pod, the Job says backoff
            self.store.put("pods", job_pods.terminated(pod, passed, "" if passed else why, at))
            why = job_pods.BACKOFF_LIMIT_REACHED
        if not passed:
            status.update(
                failed=1,
                conditions=[
                    _condition("FailureTarget", "BackoffLimitExceeded", why, at),
                    _condition("Failed", "BackoffLimitExceeded", why, at),
                ],
            )
        self._write(job, status)
        self._finished[(str(meta.get("namespace", "")), str(meta["name"]))] = self._now

    def _repair(self, kind: str, node: str, job: Obj) -> str | None:
        if self.repairs is None:
            return f"no repairs simulated for {kind}"
        return self.repairs.run(kind, node, _labels(job))

    def _write(self, job: Obj, status: Obj) -> None:
        new = copy.deepcopy(job)
        new["status"] = {**(new.get("status") or {}), **status}
        self.store.put(RESOURCE, new)
