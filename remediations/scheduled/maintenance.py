"""`maintenance_window`: drain nodes with open warning-level hardware incidents, only inside the
window that opens at each scheduled fire and lasts `window`.

Critical hardware faults are the live cycle's business (quarantine at once); warning-level ones
(correctable-error storms, row-remap pending, throttling) can wait for the night. A run that
starts after its window has closed (a catch-up after a restart) drains nothing and says so. Each
drain passes the policy's gates (protection, blast radius, rate, breaker, pause, cooldown and
attempts) and at most `max_nodes` drains start per run. Under the policy's top-level
`actuation: shadow` (scheduled jobs have no rule) each drain is journaled as state SHADOW,
"shadow: would drain ...", and nothing is written to Kubernetes.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from detectors.findings import FindingKind
from observer.fleet.units import Duration
from remediations.playbooks import PLAYBOOKS, Subject
from remediations.playbooks.drain import DrainParams
from remediations.scheduled.context import JobContext, JobOutcome, JobRequest
from remediations.scheduled.gated import execute, in_shadow, plan_for, propose

HARDWARE = [
    FindingKind.GPU_XID,
    FindingKind.GPU_MEMORY,
    FindingKind.GPU_LOST,
    FindingKind.GPU_INTERCONNECT,
    FindingKind.GPU_THROTTLE,
]


class MaintenanceParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    window: Duration = Field(default=3600.0, gt=0)
    """How long the window stays open after each scheduled fire."""
    kinds: list[FindingKind] = Field(default_factory=lambda: list(HARDWARE))
    """Incident kinds that count as hardware."""
    severities: list[str] = Field(default_factory=lambda: ["warning"])
    max_nodes: int = Field(default=1, ge=1)
    """Drains started per run (the policy's blast radius still applies on top)."""
    drain: DrainParams = Field(default_factory=DrainParams)


def run_maintenance(ctx: JobContext, req: JobRequest) -> JobOutcome:
    p = req.params
    assert isinstance(p, MaintenanceParams)
    closes = req.fire + p.window
    if req.wall_now >= closes:
        return JobOutcome(True, f"window closed {req.wall_now - closes:.0f}s ago: nothing drained")
    with ctx.lock:
        return _drain(ctx, req, p)


def _drain(ctx: JobContext, req: JobRequest, p: MaintenanceParams) -> JobOutcome:
    loop = ctx.loop
    kinds = {k.value for k in p.kinds}
    # Each open incident as of the latest cycle (the stored rows are written when an incident
    # changes, so their last_seen can be older than the evidence).
    todo = [
        t
        for t in loop.engine.open_incidents()
        if t.kind in kinds and t.severity in p.severities and t.node and t.incident_id
    ]
    todo.sort(key=lambda t: (t.opened_at, str(t.incident_id)))
    now = req.now
    view = loop.actuator.cluster_view(now)
    mine: list[str] = []
    lines: list[str] = []
    for inc in todo:
        if len(mine) >= p.max_nodes:
            lines.append(f"{inc.node}: left for the next run (max_nodes {p.max_nodes})")
            continue
        assert inc.incident_id is not None
        subject = Subject(
            inc.incident_id, inc.kind, inc.severity, inc.summary, inc.node, inc.gpu_uuid
        )
        plan = plan_for("drain", subject, view, PLAYBOOKS["drain"].params(p.drain.model_dump()))
        if isinstance(plan, str):
            lines.append(f"{inc.node}: no plan ({plan})")
            continue
        action, why = propose(
            loop,
            req.name,
            str(inc.incident_id),
            inc.kind,
            inc.last_seen,
            plan,
            view,
            now,
            reasons=(f"maintenance window {req.name}: {inc.severity} {inc.kind} on {inc.node}",),
            params=p.drain,
        )
        if action is None:
            lines.append(f"{inc.node}: not drained ({'; '.join(why)})")
            continue
        mine.append(action.id)
        lines.append(f"{inc.node}: drain {action.id} {action.state.value}")
    touched = execute(loop, mine, view, now) if mine else []
    done = {a.id: a.state.value for a in touched if a.id in mine}
    summary = f"{len(mine)} drain(s) journaled" + (f", states {done}" if done else "")
    if mine and in_shadow(loop, req.name):
        summary += " (shadow: what it would drain; nothing written to Kubernetes)"
    if not todo:
        summary = "no open warning-level hardware incidents"
    return JobOutcome(True, summary, {"nodes": lines})
