"""`diagnose_and_return`: run DCGM diagnostics on what gpufleet took out of service, then return
what passes and mark what fails for hardware replacement.

Two grains (`diagnose_targets`): nodes carrying gpufleet's quarantine label, and single GPUs that
gpufleet's own DeviceTaintRules fence (once no pod holds the GPU, per the latest snapshot's
DCGM pod attribution). Each gets a batch/v1 Job pinned to its node (`dcgmi diag -r 2`, or
`dcgmi diag -r 2 -i <index>` for one GPU; image configurable), at most `max_nodes` new Jobs per
run, and the run waits up to `wait` for outcomes (a Job still running is read again next run).

Every verdict is journaled (`remediations.validation`: audit kind `diagnostic`) before anything
follows from it; the journal, not this job, decides whether a return is allowed: the executor's
validation gate refuses any return without a verdict that passed after gpufleet's latest change
to that node or GPU. Passed (or waived by a person, `gpufleet diagnostics waive`): an `uncordon`
action removes exactly gpufleet's taint and label and uncordons only if gpufleet cordoned, or an
`unfence_gpu` action deletes gpufleet's rule. Failed: a replacement label on the node (it stays
cordoned) or on the rule (its taint stays), and a `needs_person` audit row that the alerts
outbox posts. A repair journaled after a verdict (a reset, a reboot: any action on the node or
GPU) makes it wait for a new diagnostic. Actions are gated like any other (protection,
ownership, validation, pause, breaker, rate, attempts); Job creation is audited before it is
made, nothing is created while paused or with the breaker open, and under the policy's
top-level `actuation: shadow` no Job is created (the audit log says which it would create).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from errors import GpufleetError
from observer.fleet.units import Duration
from remediations import gates
from remediations.capabilities import FencedGpuReader, JobReasons, NodeJobs
from remediations.repeats import lemon
from remediations.scheduled.context import JobContext, JobOutcome, JobRequest
from remediations.scheduled.diagnose_targets import (
    DIAG_NODE_LABEL,
    REPLACEMENT_LABEL,
    Target,
    gpu_targets,
    job_name,
    node_targets,
    since,
)
from remediations.scheduled.gated import execute, in_shadow, propose
from remediations.store import Store
from remediations.types import JOBS_NAMESPACE, stable_id
from remediations.validation import NEEDS_PERSON, current_verdict, in_flight, record_diagnosis

__all__ = [
    "DIAG_NODE_LABEL",
    "NEEDS_PERSON",
    "REPLACEMENT_LABEL",
    "DiagnoseParams",
    "job_name",
    "run_diagnose",
]


class DiagnoseParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str = "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04"
    command: list[str] = Field(default_factory=lambda: ["dcgmi", "diag", "-r", "2"])
    gpu_command: list[str] = Field(
        default_factory=lambda: ["dcgmi", "diag", "-r", "2", "-i", "{index}"]
    )
    """For one fenced GPU; `{index}` becomes the GPU's index (its ResourceSlice `index`)."""
    gpus: bool = True
    """Also diagnose single GPUs fenced by gpufleet's DeviceTaintRules."""
    namespace: str = JOBS_NAMESPACE
    """Where the diagnostic Jobs are created: `gpufleet-jobs`, apart from the service's own
    (Pod Security `restricted`) namespace."""
    max_nodes: int = Field(default=2, ge=1)
    """New diagnostic Jobs per run (nodes and GPUs together)."""
    wait: Duration = Field(default=600.0, ge=0)
    """Wall seconds a run waits for outcomes; later outcomes are read by the next run."""
    poll: Duration = Field(default=5.0, gt=0)
    require_idle: bool = True
    """Diagnose only nodes without workload pods (drained: a node-wide dcgmi needs every GPU)
    and GPUs no pod holds."""


def _start(ctx: JobContext, diag: NodeJobs, p: DiagnoseParams, t: Target, now: float) -> str:
    store = ctx.loop.engine.store
    if diag.exists(p.namespace, t.name):
        return "exists"
    store.audit(
        now,
        "k8s_write",
        f"about to create diagnostic job {p.namespace}/{t.name} on {t.node}",
        target=t.subject,
        detail={"op": "create_job", "name": t.name, "image": p.image, "command": list(t.command)},
    )
    did = diag.ensure(p.namespace, t.node, t.name, p.image, list(t.command), dict(t.labels), t.gpus)
    store.audit(now, "k8s_write", f"did create_job {p.namespace}/{t.name}: {did}", target=t.subject)
    return did


def _shadow(ctx: JobContext, p: DiagnoseParams, todo: list[Target], lines: list[str]) -> JobOutcome:
    """Shadow (the policy's top-level actuation): journal the diagnostic Jobs it would create,
    create none (a Job is a Kubernetes write), so no outcome and no action follows."""
    now = ctx.clock()
    for t in todo:
        msg = (
            f"shadow: would create diagnostic job {p.namespace}/{t.name} on {t.node} "
            f"({' '.join(t.command)}); nothing written to Kubernetes"
        )
        ctx.loop.engine.store.audit(
            now,
            "decision",
            msg,
            target=t.subject,
            detail={"op": "create_job", "name": t.name, "image": p.image, "shadow": True},
        )
        lines.append(msg)
    return JobOutcome(
        True,
        f"shadow: would diagnose {len(todo)} node(s) or GPU(s); nothing written to Kubernetes",
        {"nodes": lines, "outcomes": {}},
    )


def _targets(ctx: JobContext, p: DiagnoseParams, now: float) -> tuple[list[Target], list[str]]:
    loop = ctx.loop
    store = loop.engine.store
    with ctx.lock:
        view = loop.actuator.cluster_view(now)
    targets, notes = node_targets(store, view, p.command, p.require_idle)
    if p.gpus and isinstance(loop.actuator, FencedGpuReader):
        try:
            fenced = loop.actuator.fenced_gpus()
        except GpufleetError as exc:
            return targets, [*notes, f"fenced GPUs not read ({exc})"]
        holders = ctx.gpu_holders() if ctx.gpu_holders is not None else None
        more, why = gpu_targets(store, fenced, holders, p.gpu_command, p.require_idle)
        targets, notes = targets + more, notes + why
    return targets, notes


def _wait(
    ctx: JobContext, diag: NodeJobs, p: DiagnoseParams, running: list[Target]
) -> dict[str, str]:
    outcomes: dict[str, str] = {}
    deadline = time.monotonic() + p.wait
    while True:
        for t in running:
            if t.subject not in outcomes:
                got = diag.outcome(p.namespace, t.name)
                if got is not None:
                    outcomes[t.subject] = got
        if len(outcomes) == len(running) or time.monotonic() >= deadline:
            return outcomes
        if ctx.sleep(min(p.poll, max(0.0, deadline - time.monotonic()))):
            return outcomes


def _journal_verdict(
    store: Store, t: Target, got: str, p: DiagnoseParams, now: float, note: str = ""
) -> None:
    job = f"{p.namespace}/{t.name}"
    record_diagnosis(store, now, t.subject, got, node=t.node, job=job, note=note)
    if got == "failed":
        store.audit(
            now,
            NEEDS_PERSON,
            f"{t.subject} on {t.node} failed `{' '.join(t.command)}` (job {p.namespace}/{t.name}): "
            "kept out of service and marked for hardware replacement; a person must replace "
            "or re-test it",
            target=t.subject,
            detail={"node": t.node, "job": t.name, "label": REPLACEMENT_LABEL},
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
    g = loop.engine.policy.gates
    targets, lines = _targets(ctx, p, ctx.clock())
    verdicts: dict[str, str] = {}
    notes: dict[str, str] = {}
    todo: list[Target] = []
    for t in targets:
        busy = in_flight(store, t.subject, t.node)
        if busy is not None:
            lines.append(f"{t.subject}: waits for {busy.playbook} (action {busy.id}, {busy.state})")
            continue
        worn = lemon(store, t.subject, t.node, g.lemon_window, g.lemon_repeats, ctx.clock())
        if worn is not None:  # no diagnostic, no return: marked for replacement at once
            store.audit(ctx.clock(), NEEDS_PERSON, worn, target=t.subject, detail={"node": t.node})
            verdicts[t.subject], notes[t.subject] = "lemon", worn
            continue
        v = current_verdict(store, t.subject, t.node)
        if v is not None:
            verdicts[t.subject] = v.outcome
            if v.outcome == "waived":
                notes[t.subject] = f"diagnostic waived by {v.by} on {v.subject}: {v.note}"
        elif len(todo) < p.max_nodes:
            todo.append(t)
    if in_shadow(loop, req.name):
        return _shadow(ctx, p, todo, lines)
    running: list[Target] = []
    for t in todo:
        try:
            _start(ctx, diag, p, t, ctx.clock())
            running.append(t)
        except GpufleetError as exc:
            lines.append(f"{t.subject}: diagnostic job not created ({exc})")
    outcomes = _wait(ctx, diag, p, running)
    for t in running:
        if t.subject not in outcomes:
            lines.append(f"{t.subject}: diagnostics {t.name} still running")
        elif since(store, t.subject, t.node) != t.since:
            # gpufleet changed it while the Job ran (a reset, a reboot): the outcome speaks
            # for the hardware before that change; the next run starts a Job of its own
            lines.append(f"{t.subject}: {outcomes.pop(t.subject)} ignored, changed meanwhile")
        else:
            got = outcomes[t.subject]
            # a failed diagnostic's verdict carries what dcgmi said (its pod's termination message)
            said = (
                diag.reason(p.namespace, t.name)
                if got == "failed" and isinstance(diag, JobReasons)
                else ""
            )
            _journal_verdict(store, t, got, p, ctx.clock(), said)
            verdicts[t.subject] = outcomes[t.subject]
    decided = [t for t in targets if t.subject in verdicts]
    mine = _act(ctx, req.name, p, decided, verdicts, notes, lines)
    return JobOutcome(
        True,
        f"{len(verdicts)} node(s) or GPU(s) with a verdict, {len(mine)} action(s) journaled",
        {"nodes": lines, "outcomes": outcomes},
    )


def _act(
    ctx: JobContext,
    job: str,
    p: DiagnoseParams,
    decided: list[Target],
    verdicts: Mapping[str, str],
    notes: Mapping[str, str],
    lines: list[str],
) -> list[str]:
    """Journal (through the gates) and carry out what each verdict calls for."""
    loop = ctx.loop
    mine: list[str] = []
    with ctx.lock:
        now = ctx.clock()
        view = loop.actuator.cluster_view(now)
        for t in decided:
            got = verdicts[t.subject]
            back = got in ("passed", "waived")
            plan = t.back if back else t.replace
            if plan.target_nodes and plan.target_nodes[0] not in view.nodes:
                lines.append(f"{t.subject}: {got}, but node {t.node} is gone")
                continue
            action, why = propose(
                loop,
                job,
                stable_id("diag", t.name),
                "diagnostics",
                now,
                plan,
                view,
                now,
                reasons=(
                    notes.get(t.subject)
                    or f"`{' '.join(t.command)}` {got} on {t.subject} (job {p.namespace}/{t.name})",
                ),
            )
            if action is None:
                lines.append(f"{t.subject}: {got}, not acted on ({'; '.join(why)})")
                continue
            mine.append(action.id)
            verdict = "returned to service" if back else "marked for hardware replacement"
            lines.append(f"{t.subject}: {got}: {verdict} (action {action.id})")
        if mine:
            execute(loop, mine, view, now)
    return mine
