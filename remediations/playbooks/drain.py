"""drain and migrate: move work off a node through policy/v1 Evictions (never raw deletes).

kubectl's semantics: skip DaemonSet and mirror pods; evict, and on a PodDisruptionBudget's 429
retry with backoff — but always inside an overall timeout (kubectl #172: `--timeout=0` hangs
forever); honour each pod's grace period unless the policy sets one. `migrate` evicts only one
job's pods, after cordoning, so the job's controller reschedules them on other nodes.
"""

from __future__ import annotations

from pydantic import Field

from observer.fleet.units import Duration
from remediations.capabilities import ClusterReader
from remediations.cluster_rules import evictable
from remediations.cluster_view import ClusterView, PodView
from remediations.playbooks.base import (
    BaseParams,
    NoPlan,
    Plan,
    Playbook,
    Subject,
    Verification,
    VerifyStatus,
    node_of,
    node_target,
)
from remediations.types import Intent


class DrainParams(BaseParams):
    timeout: Duration = Field(default=600.0, gt=0, le=86400)
    """Overall eviction timeout; 0 (forever) is refused on purpose."""
    grace_period: int | None = Field(default=None, ge=0)
    """None: each pod's own terminationGracePeriodSeconds."""
    backoff_initial: Duration = Field(default=5.0, gt=0)
    backoff_max: Duration = Field(default=60.0, gt=0)
    include_unmanaged: bool = False
    """Evict pods without a controller (kubectl --force); they will not come back."""
    skip_namespaces: list[str] = Field(default_factory=list)
    uncordon_on_failure: bool = False


def evict_args(params: DrainParams, job: str | None = None) -> dict[str, object]:
    return {
        "timeout": params.timeout,
        "grace_period": params.grace_period,
        "backoff_initial": params.backoff_initial,
        "backoff_max": params.backoff_max,
        "include_unmanaged": params.include_unmanaged,
        "skip_namespaces": sorted(params.skip_namespaces),
        "job": job,
    }


def _remaining(i: Intent, reader: ClusterReader) -> list[PodView]:
    """The intent's pods still on the node; with `only` (named pods), the pinned ones only: a
    replacement under the same name is a new pod, not one left behind."""
    skip = frozenset(i.args.get("skip_namespaces") or ())
    pods = [
        p
        for p in reader.pods_on_node(i.target)
        if evictable(p, bool(i.args.get("include_unmanaged")), skip)
    ]
    only = i.args.get("only")
    if only is not None:
        if "pods" not in i.args:  # not pinned yet
            return [p for p in pods if p.key in only]
        pinned = {str(p[2]) for p in i.args["pods"] if p[2]}
        return [p for p in pods if p.key in only and p.uid in pinned]
    job = i.args.get("job")
    return [p for p in pods if p.job == job] if job else pods


def drain_verify(intents: tuple[Intent, ...], reader: ClusterReader) -> Verification:
    """OK when no pod an `evict_pods` intent covers is left on its node; the outcome says what
    was evicted from where (a person reading "done" asks how many pods it moved)."""
    done: list[str] = []
    for i in intents:
        if i.op == "evict_pods":
            left = _remaining(i, reader)
            if left:
                names = ", ".join(p.key for p in left[:5])
                return Verification(VerifyStatus.PENDING, f"still on {i.target}: {names}")
            done.append(evicted_summary(i))
    return Verification(VerifyStatus.OK, "; ".join(done) or "no evictable pods left on the node")


def evicted_summary(i: Intent) -> str:
    """'evicted 2 pod(s) from a100-0002 (ns/a, ns/b); none left': the pinned pods, all gone."""
    pods = [f"{p[0]}/{p[1]}" for p in i.args.get("pods") or ()]
    if not pods:
        return f"no evictable pods were on {i.target}; none left"
    names = ", ".join(pods[:5]) + (f", +{len(pods) - 5} more" if len(pods) > 5 else "")
    return f"evicted {len(pods)} pod(s) from {i.target} ({names}); none left"


class Drain(Playbook):
    name = "drain"
    disruptive = True
    Params = DrainParams

    def plan(self, subject: Subject, view: ClusterView, params: BaseParams) -> Plan | NoPlan:
        assert isinstance(params, DrainParams)
        node = node_of(subject, view)
        if isinstance(node, NoPlan):
            return node
        skip = frozenset(params.skip_namespaces)
        pods = [p for p in view.pods_on(node) if evictable(p, params.include_unmanaged, skip)]
        intents = (Intent("cordon", node), Intent("evict_pods", node, evict_args(params)))
        return Plan(
            self.name,
            node_target(node),
            intents,
            True,
            (node,),
            namespaces=tuple(sorted({p.namespace for p in pods})),
            priority_classes=tuple(sorted({p.priority_class for p in pods if p.priority_class})),
        )

    def verify(
        self, intents: tuple[Intent, ...], reader: ClusterReader, params: BaseParams
    ) -> Verification:
        return drain_verify(intents, reader)

    def rollback(self, intents: tuple[Intent, ...]) -> tuple[Intent, ...]:
        return ()


class Migrate(Playbook):
    name = "migrate"
    disruptive = True
    Params = DrainParams

    def plan(self, subject: Subject, view: ClusterView, params: BaseParams) -> Plan | NoPlan:
        assert isinstance(params, DrainParams)
        node = node_of(subject, view)
        if isinstance(node, NoPlan):
            return node
        job = subject.job
        if job is None and subject.gpu_uuid is not None:
            pod = view.pods.get(view.pod_of_gpu.get(subject.gpu_uuid, ""))
            job = pod.job if pod is not None else None
        if job is None or job not in view.jobs:
            return NoPlan("no job to migrate off the node")
        pods = [p for p in view.pods_on(node) if p.job == job]
        if not pods:
            return NoPlan(f"job {job} has no pods on {node}")
        jv = view.jobs[job]
        args = {**evict_args(params, job), "selector": f"{jv.label}={jv.name}"}
        intents = (Intent("cordon", node), Intent("evict_pods", node, args))
        return Plan(
            self.name,
            f"job/{job}",
            intents,
            True,
            (node,),
            namespaces=(view.jobs[job].namespace,),
            priority_classes=tuple(sorted({p.priority_class for p in pods if p.priority_class})),
        )

    def verify(
        self, intents: tuple[Intent, ...], reader: ClusterReader, params: BaseParams
    ) -> Verification:
        for i in intents:
            if i.op != "evict_pods":
                continue
            if _remaining(i, reader):
                return Verification(VerifyStatus.PENDING, f"job still has pods on {i.target}")
            selector = i.args.get("selector")
            if selector:
                ns = str(i.args["job"]).split("/", 1)[0]
                pods = reader.pods_selected(ns, str(selector))
                if not pods or any(p.phase != "Running" or p.node == i.target for p in pods):
                    return Verification(VerifyStatus.PENDING, "job not yet running elsewhere")
        moved = "; ".join(evicted_summary(i) for i in intents if i.op == "evict_pods")
        return Verification(VerifyStatus.OK, f"{moved}; the job's pods run on other nodes")

    def rollback(self, intents: tuple[Intent, ...]) -> tuple[Intent, ...]:
        return ()
