"""`diagnose_and_return`: run DCGM diagnostics on quarantined nodes, then return the ones that
pass to service and flag the ones that fail for hardware replacement.

For each node carrying gpufleet's quarantine label (at most `max_nodes` per run) it creates a
batch/v1 Job pinned to the node (`dcgmi diag -r 2`, image configurable) — named after the node
and the quarantine action, so a re-run reads the same Job instead of starting another — and
waits up to `wait` for its outcome (a Job still running is read again on the next run). Passed:
an `uncordon` action removes exactly gpufleet's own taint and label and uncordons only if
gpufleet cordoned. Failed: a `quarantine` action adds the replacement label; the node stays
cordoned. Both are journaled and gated like any action (protection, ownership, pause, breaker,
rate, attempts); the Job creation itself is journaled in the audit log before it is made, and
nothing is created while automation is paused or the breaker is open. Under the policy's
top-level `actuation: shadow` no Job is created: the audit log says which it would create.
"""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict, Field

from errors import GpufleetError
from gpufleet.service.context import JobContext, JobOutcome, JobRequest
from gpufleet.service.jobs.gated import execute, in_shadow, propose
from observer.fleet.units import Duration
from remediations import gates
from remediations.actuator_api import NodeJobs
from remediations.cluster_view import ClusterView, NodeView
from remediations.playbooks import Plan
from remediations.types import (
    ACTION_ANNOTATION,
    QUARANTINE_LABEL,
    QUARANTINE_TAINT,
    Intent,
    stable_id,
)

REPLACEMENT_LABEL = "gpufleet.io/hardware-replacement"
DIAG_NODE_LABEL = "gpufleet.io/diagnose-node"


class DiagnoseParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str = "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04"
    command: list[str] = Field(default_factory=lambda: ["dcgmi", "diag", "-r", "2"])
    namespace: str = "gpufleet"
    """Where the diagnostic Jobs are created (the service's own namespace)."""
    max_nodes: int = Field(default=2, ge=1)
    wait: Duration = Field(default=600.0, ge=0)
    """Wall seconds a run waits for outcomes; later outcomes are read by the next run."""
    poll: Duration = Field(default=5.0, gt=0)
    require_idle: bool = True
    """Diagnose only nodes without workload pods (drained): dcgmi needs every GPU."""


def job_name(node: str, action: str) -> str:
    """A DNS-1123 name per node and quarantine: `gpufleet-diag-<node>-<hash>`."""
    return f"gpufleet-diag-{node}"[:48].rstrip("-") + "-" + stable_id(node, action)[:8]


def _candidates(view: ClusterView, require_idle: bool) -> tuple[list[NodeView], list[str]]:
    nodes: list[NodeView] = []
    notes: list[str] = []
    for n in sorted(view.nodes.values(), key=lambda n: n.name):
        if QUARANTINE_LABEL not in n.labels or REPLACEMENT_LABEL in n.labels:
            continue
        if require_idle:
            busy = [p for p in view.pods_on(n.name) if p.owner_kind != "DaemonSet" and not p.mirror]
            if busy:
                notes.append(f"{n.name}: waits for {len(busy)} workload pod(s) to leave")
                continue
        nodes.append(n)
    return nodes, notes


def _return_plan(node: NodeView) -> Plan:
    intents = (
        Intent("untaint", node.name, {"key": QUARANTINE_TAINT}),
        Intent("unlabel", node.name, {"keys": [QUARANTINE_LABEL]}),
        Intent("uncordon", node.name, {"only_if_ours": True}),
    )
    return Plan(
        "uncordon",
        f"node/{node.name}",
        intents,
        False,
        (node.name,),
        undo=True,
        owned=node.cordoned_by_us,
    )


def _replace_plan(node: NodeView, name: str) -> Plan:
    label = Intent("label", node.name, {"labels": {REPLACEMENT_LABEL: name[-8:]}})
    return Plan("quarantine", f"node/{node.name}", (label,), True, (node.name,))


def _start(
    ctx: JobContext, diag: NodeJobs, p: DiagnoseParams, node: NodeView, name: str, now: float
) -> str:
    store = ctx.loop.engine.store
    if diag.exists(p.namespace, name):
        return "exists"
    store.audit(
        now,
        "k8s_write",
        f"about to create diagnostic job {p.namespace}/{name} on {node.name}",
        target=f"node/{node.name}",
        detail={"op": "create_job", "name": name, "image": p.image, "command": p.command},
    )
    did = diag.ensure(
        p.namespace,
        node.name,
        name,
        p.image,
        list(p.command),
        {DIAG_NODE_LABEL: node.name},
        node.gpu_count,
    )
    store.audit(
        now,
        "k8s_write",
        f"did create_job {p.namespace}/{name}: {did}",
        target=f"node/{node.name}",
    )
    return did


def _shadow(
    ctx: JobContext, p: DiagnoseParams, names: dict[str, str], lines: list[str]
) -> JobOutcome:
    """Shadow (the policy's top-level actuation): journal the diagnostic Jobs it would create,
    create none (a Job is a Kubernetes write), so no outcome and no action follows."""
    now = ctx.clock()
    for node, name in names.items():
        msg = (
            f"shadow: would create diagnostic job {p.namespace}/{name} on {node} "
            f"({' '.join(p.command)}); nothing written to Kubernetes"
        )
        ctx.loop.engine.store.audit(
            now,
            "decision",
            msg,
            target=f"node/{node}",
            detail={"op": "create_job", "name": name, "image": p.image, "shadow": True},
        )
        lines.append(msg)
    return JobOutcome(
        True,
        f"shadow: would diagnose {len(names)} node(s); nothing written to Kubernetes",
        {"nodes": lines, "outcomes": {}},
    )


def run_diagnose(ctx: JobContext, req: JobRequest) -> JobOutcome:
    p = req.params
    assert isinstance(p, DiagnoseParams)
    if ctx.diagnostics is None:
        return JobOutcome(False, "no Kubernetes API for diagnostic Jobs")
    diag = ctx.diagnostics
    loop = ctx.loop
    store = loop.engine.store
    state = store.engine_state()
    stop = gates.first_failure([gates.paused(state), gates.breaker(state)])
    if stop is not None:
        return JobOutcome(True, f"nothing diagnosed ({stop.gate}: {stop.reason})")
    with ctx.lock:
        view = loop.actuator.cluster_view(ctx.clock())
    nodes, notes = _candidates(view, p.require_idle)
    nodes = nodes[: p.max_nodes]
    names = {n.name: job_name(n.name, n.annotations.get(ACTION_ANNOTATION, "")) for n in nodes}
    lines = list(notes)
    if in_shadow(loop, req.name):
        return _shadow(ctx, p, names, lines)
    for n in nodes:
        try:
            _start(ctx, diag, p, n, names[n.name], ctx.clock())
        except GpufleetError as exc:
            lines.append(f"{n.name}: diagnostic job not created ({exc})")
            names.pop(n.name)
    outcomes: dict[str, str] = {}
    deadline = time.monotonic() + p.wait
    while names.keys() - outcomes.keys():
        for node, name in names.items():
            if node not in outcomes:
                got = diag.outcome(p.namespace, name)
                if got is not None:
                    outcomes[node] = got
        if not names.keys() - outcomes.keys() or time.monotonic() >= deadline:
            break
        if ctx.sleep(min(p.poll, max(0.0, deadline - time.monotonic()))):
            break
    mine: list[str] = []
    with ctx.lock:
        now = ctx.clock()
        view = loop.actuator.cluster_view(now)
        for node, name in names.items():
            got = outcomes.get(node)
            nv = view.nodes.get(node)
            if got is None or nv is None:
                lines.append(f"{node}: diagnostics {name} still running")
                continue
            plan = _return_plan(nv) if got == "passed" else _replace_plan(nv, name)
            verdict = (
                "returned to service" if got == "passed" else "labelled for hardware replacement"
            )
            action, why = propose(
                loop,
                req.name,
                stable_id("diag", name),
                "diagnostics",
                now,
                plan,
                view,
                now,
                reasons=(f"dcgmi diag -r 2 {got} on {node} (job {p.namespace}/{name})",),
            )
            if action is None:
                lines.append(f"{node}: {got}, not acted on ({'; '.join(why)})")
                continue
            mine.append(action.id)
            lines.append(f"{node}: {got}: {verdict} (action {action.id})")
        if mine:
            execute(loop, mine, view, now)
    return JobOutcome(
        True,
        f"{len(names)} node(s) diagnosed, {len(mine)} action(s) journaled",
        {"nodes": lines, "outcomes": outcomes},
    )
