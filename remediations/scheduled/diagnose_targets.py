"""What `diagnose_and_return` diagnoses: quarantined nodes and GPUs fenced by gpufleet's rules.

Each becomes a `Target`: the journal subject (`node/<n>` or `gpu/<uuid>`), the node its Job is
pinned to, the command (`dcgmi diag -r 2`, or `... -i <index>` for one GPU), the Job's name, and
the plans that follow a verdict: pass -> give back exactly what gpufleet took (untaint, unlabel,
uncordon only if ours; or delete gpufleet's DeviceTaintRule); fail -> a replacement mark (a node
label, or a label on the rule, whose taint stays). The Job name derives from the latest gpufleet
change to the target (a fence, quarantine, reset, reboot: whatever playbook journaled it), so a
repair after a diagnostic gets a Job of its own and a re-run reads the same Job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from remediations.capabilities import FencedGpu
from remediations.cluster_names import fence_rule_name, label_value
from remediations.cluster_names import job_name as job_name_of
from remediations.cluster_view import ClusterView, NodeView
from remediations.holds import marked_by_us, orphans
from remediations.playbooks import Plan
from remediations.playbooks.replacement import NAME as MARK
from remediations.store import Store
from remediations.types import (
    ACTION_ANNOTATION,
    QUARANTINE_LABEL,
    QUARANTINE_TAINT,
    Intent,
)
from remediations.validation import last_change, scope

REPLACEMENT_LABEL = "gpufleet.io/hardware-replacement"
DIAG_NODE_LABEL = "gpufleet.io/diagnose-node"
DIAG_GPU_LABEL = "gpufleet.io/diagnose-gpu"


def job_name(node: str, action: str, gpu: int | None = None) -> str:
    """A DNS-1123 name per node (or GPU) and change: `gpufleet-diag-<node>[-g<i>]-<hash>`,
    valid whatever the node's name (see kube_names)."""
    key = (node, action) if gpu is None else (node, str(gpu), action)
    return job_name_of("gpufleet-diag", node, *key, suffix="" if gpu is None else f"-g{gpu}")


@dataclass(frozen=True, slots=True)
class Target:
    subject: str
    node: str
    name: str
    """The diagnostic Job's name."""
    command: tuple[str, ...]
    labels: Mapping[str, str]
    gpus: int
    """GPUs the Job requests (the node's count for a node-wide run; none for one fenced GPU)."""
    back: Plan
    replace: Plan
    since: str = ""
    """The id of gpufleet's latest change the Job was named after ('' if none journaled)."""


def awaits_person(store: Store, subject: str, node: str) -> bool:
    """Marked for replacement, and nothing gpufleet did since (a reset or reboot after the mark
    earns a new diagnostic)."""
    change = last_change(store, scope(subject, node))
    return change is None or any(
        i.op in ("label", "label_device_rule") and REPLACEMENT_LABEL in (i.args.get("labels") or {})
        for i in change.plan
    )


def since(store: Store, subject: str, node: str) -> str:
    """The id of gpufleet's latest change to the subject ('' if none is journaled)."""
    change = last_change(store, scope(subject, node))
    return change.id if change is not None else ""


def node_return_plan(node: NodeView) -> Plan:
    intents = (
        Intent("untaint", node.name, {"key": QUARANTINE_TAINT}),
        Intent("unlabel", node.name, {"keys": [QUARANTINE_LABEL, REPLACEMENT_LABEL]}),
        Intent("uncordon", node.name, {"only_if_ours": True}),
    )
    return Plan(
        "uncordon",
        f"node/{node.name}",
        intents,
        False,
        (node.name,),
        undo=True,
        owned=marked_by_us(node),
    )


def node_targets(
    store: Store, view: ClusterView, command: list[str], require_idle: bool
) -> tuple[list[Target], list[str]]:
    """Quarantined nodes, and nodes gpufleet holds with no owner left (`remediations.holds`:
    a drain whose incident ended), without a replacement mark (drained, unless `require_idle`
    is off)."""
    out: list[Target] = []
    notes: list[str] = []
    orphaned = {h.node for h in orphans(store, view)}
    for n in sorted(view.nodes.values(), key=lambda n: n.name):
        if QUARANTINE_LABEL not in n.labels and n.name not in orphaned:
            continue
        if REPLACEMENT_LABEL in n.labels and awaits_person(store, f"node/{n.name}", n.name):
            continue
        if require_idle:
            busy = [p for p in view.pods_on(n.name) if p.owner_kind != "DaemonSet" and not p.mirror]
            if busy:
                notes.append(f"{n.name}: waits for {len(busy)} workload pod(s) to leave")
                continue
        subject = f"node/{n.name}"
        marker = since(store, subject, n.name)
        name = job_name(n.name, marker or n.annotations.get(ACTION_ANNOTATION, ""))
        mark = Intent("label", n.name, {"labels": {REPLACEMENT_LABEL: name[-8:]}})
        out.append(
            Target(
                subject,
                n.name,
                name,
                tuple(command),
                {DIAG_NODE_LABEL: label_value(n.name)},
                n.gpu_count,
                node_return_plan(n),
                Plan(MARK, subject, (mark,), False, (n.name,)),
                marker,
            )
        )
    return out, notes


def gpu_command(template: list[str], index: int) -> tuple[str, ...]:
    return tuple(part.replace("{index}", str(index)) for part in template)


def gpu_targets(
    store: Store,
    fenced: list[FencedGpu],
    holders: Mapping[str, str] | None,
    template: list[str],
    require_idle: bool,
) -> tuple[list[Target], list[str]]:
    """GPUs gpufleet's own DeviceTaintRules fence, not marked for replacement, that no pod holds
    (per `holders`, GPU UUID -> pod; None: unknown, so none is diagnosed while `require_idle`)
    and no ResourceClaim reserves (`FencedGpu.held_by`)."""
    out: list[Target] = []
    notes: list[str] = []
    for g in sorted(fenced, key=lambda g: (g.node, g.index)):
        if g.rule != fence_rule_name(g.uuid):
            continue
        if REPLACEMENT_LABEL in g.labels and awaits_person(store, f"gpu/{g.uuid}", g.node):
            continue
        if require_idle and holders is None:
            notes.append(f"{g.node} GPU {g.index}: waits (no telemetry says which pod holds it)")
            continue
        if require_idle and holders is not None and g.uuid in holders:
            notes.append(f"{g.node} GPU {g.index}: waits for {holders[g.uuid]} to release it")
            continue
        if require_idle and g.held_by:
            who = ", ".join(g.held_by)
            notes.append(f"{g.node} GPU {g.index}: waits for {who} (ResourceClaim) to release it")
            continue
        subject = f"gpu/{g.uuid}"
        marker = since(store, subject, g.node)
        name = job_name(g.node, marker or g.annotations.get(ACTION_ANNOTATION, ""), g.index)
        unfence = Intent("unfence_device", g.node, {"rule": g.rule})
        mark = Intent(
            "label_device_rule", g.node, {"rule": g.rule, "labels": {REPLACEMENT_LABEL: name[-8:]}}
        )
        out.append(
            Target(
                subject,
                g.node,
                name,
                gpu_command(template, g.index),
                {DIAG_NODE_LABEL: label_value(g.node), DIAG_GPU_LABEL: g.uuid.lower()[:63]},
                0,
                Plan("unfence_gpu", subject, (unfence,), False, (g.node,), undo=True),
                Plan(MARK, subject, (mark,), False, (g.node,)),
                marker,
            )
        )
    return out, notes
