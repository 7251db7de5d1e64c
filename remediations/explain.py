"""What a policy would do, rule by rule, before it meets a cluster: `gpufleet policy explain`.

For each rule: whether its decisions would act automatically, await a person's approval, or only
notify, and why — the rule's mode, its actuation (shadow or live, and where that comes from), and
the budgets and gates an automatic action must still pass (blast radius, rate, attempts, cooldown,
maintenance windows, the circuit breaker). Pure: reads the policy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from remediations.playbooks import PLAYBOOKS
from remediations.playbooks.reboot import RebootParams
from remediations.playbooks.reset import ResetParams
from remediations.policy import Gates, Policy, Rule
from remediations.types import Actuation, Mode

GRAINS: dict[str, str] = {
    "fence_gpu": (
        "one GPU (a DRA DeviceTaintRule on its device): the node and its other GPUs stay in "
        "service; needs DeviceTaintRules served (Kubernetes 1.37, or 1.34-1.36 with the "
        "DRADeviceTaints gate) and the NVIDIA DRA driver publishing the GPUs; where none are "
        "served, the pods-on-GPU grain (evict_gpu_pods' guard, budgeted as disruptive)"
    ),
    "unfence_gpu": "one GPU (deletes gpufleet's own DeviceTaintRule for it)",
    "evict_gpu_pods": (
        "the pods on one GPU (device-plugin clusters, or DRA after fence_gpu): only the pods "
        "holding it are evicted; the node stays schedulable only when the GPU is already kept "
        "from new pods (gpufleet's DeviceTaintRule, or the device plugin withdrew it: "
        "allocatable nvidia.com/gpu below capacity), else it is cordoned; node-level faults "
        "(gpu_lost, XID 79) get no plan"
    ),
    "drain": "the whole node: cordoned and every evictable pod evicted (node-level faults)",
    "quarantine": "the whole node: kept free of new work (cordon, taint, label)",
    "cordon": "the whole node: kept free of new work",
    "migrate": "one job's pods on the node, after cordoning the node",
    "reset_gpu": (
        "one GPU, reset in place by a privileged Job pinned to its node once no pod holds it; "
        "the node's other GPUs keep working"
    ),
    "reboot_node": "the whole node: rebooted by its node agent, a few nodes at a time",
    "restart_job": "one job: its pods deleted for the job's controller to recreate",
    "restart_pod": "one pod: deleted for its controller to recreate",
}
"""The grain each playbook repairs at (GPU, pods on a GPU, node), as `policy explain` says it."""


class Outcome(StrEnum):
    AUTOMATIC = "acts automatically"
    APPROVAL = "awaits approval"
    NOTIFY = "only notifies"


@dataclass(frozen=True, slots=True)
class RuleExplanation:
    rule: str
    playbook: str
    matches: str
    outcome: Outcome
    """What the rule's decisions do in this configuration."""
    would: Outcome
    """What they would do with `actuation: live` (the same as `outcome` when live)."""
    actuation: Actuation
    actuation_from: str
    why: tuple[str, ...]
    grain: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "playbook": self.playbook,
            "matches": self.matches,
            "outcome": self.outcome.value,
            "live_outcome": self.would.value,
            "actuation": self.actuation.value,
            "actuation_from": self.actuation_from,
            "why": list(self.why),
            "grain": self.grain,
        }


def _matches(rule: Rule) -> str:
    m = rule.match
    parts = [", ".join(k.value for k in m.kinds) if m.kinds else "every kind"]
    if m.severities:
        parts.append("severity " + "/".join(s.value for s in m.severities))
    if m.node_pools:
        parts.append("pools " + ", ".join(m.node_pools))
    if m.node_labels:
        parts.append("nodes " + ", ".join(f"{k}={v}" for k, v in m.node_labels.items()))
    if m.namespaces:
        parts.append("namespaces " + ", ".join(m.namespaces))
    return "; ".join(parts)


def _minutes(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    return f"{seconds / 60:g}m" if seconds % 60 == 0 else f"{seconds:g}s"


def _budgets(g: Gates, rule: Rule) -> list[str]:
    """The budgets and gates an action of this rule passes at the moment it would run."""
    out: list[str] = []
    if PLAYBOOKS[rule.playbook].disruptive:
        br = g.blast_radius
        out.append(
            f"blast radius: at most {br.max_nodes} GPU nodes unavailable at once and "
            f"{br.max_percent_of_pool:g}% of a pool (else it waits)"
        )
    a = g.attempts
    out += [
        f"rate: at most {g.rate.max_actions_per_hour} actions per hour (else it waits)",
        f"cooldown {_minutes(a.cooldown)} per target; after {a.max_attempts} attempts within "
        f"{_minutes(a.window)} a person is asked",
        f"circuit breaker: stops all automatic actions when more than "
        f"{g.breaker.threshold_percent:g}% of GPU nodes (at least {g.breaker.min_nodes}) have "
        f"hardware faults within {_minutes(g.breaker.window)}",
    ]
    out += _playbook_limits(rule)
    mw = g.maintenance
    if rule.playbook in mw.applies_to and mw.windows:
        out.append(f"runs only inside {len(mw.windows)} maintenance window(s); waits otherwise")
    return out


def _playbook_limits(rule: Rule) -> list[str]:
    """Limits a playbook itself keeps (its params), beside the policy's gates."""
    p = PLAYBOOKS[rule.playbook].params(rule.params)
    if isinstance(p, RebootParams):
        return [
            f"reboot lock: at most {p.max_concurrent} node(s) rebooting at once (nodes carrying "
            f"the reboot marker, counted in the cluster; else it waits)",
            f"reboot loop guard: after {p.max_reboots} gpufleet reboots of a node within "
            f"{_minutes(p.reboot_window)} a person decides",
        ]
    if isinstance(p, ResetParams):
        return ["waits until no pod holds the GPU, then runs the reset Job on its node"]
    return []


def _live_outcome(rule: Rule) -> tuple[Outcome, list[str]]:
    if rule.mode is Mode.NOTIFY:
        return Outcome.NOTIFY, ["mode: notify (reports the incident; no plan, no action)"]
    if rule.mode is Mode.APPROVAL:
        return Outcome.APPROVAL, ["mode: approval (a person approves each action)"]
    return Outcome.AUTOMATIC, ["mode: auto (no person in the loop when every gate passes)"]


def explain_rule(policy: Policy, rule: Rule, *, force_shadow: bool = False) -> RuleExplanation:
    would, why = _live_outcome(rule)
    if force_shadow:
        actuation, source = Actuation.SHADOW, "the gpufleet config (shadow: true forces shadow)"
    elif rule.actuation is not None:
        actuation, source = rule.actuation, f"the rule (actuation: {rule.actuation.value})"
    else:
        actuation, source = policy.actuation, f"the policy (actuation: {policy.actuation.value})"
    outcome = would
    if would is not Outcome.NOTIFY:
        if actuation is Actuation.SHADOW:
            outcome = Outcome.NOTIFY
            why.append(
                f"actuation: shadow, from {source}: journals 'shadow: would ...' and notifies; "
                f"writes nothing to Kubernetes (live, it {would.value})"
            )
        else:
            why.append(f"actuation: live, from {source}: writes to Kubernetes")
        if would is Outcome.AUTOMATIC:
            why.append(
                "cold start: findings whose evidence was present before gpufleet started "
                "watching never act automatically; they await approval"
            )
        why += [f"budget: {b}" for b in _budgets(policy.gates, rule)]
    grain = GRAINS.get(rule.playbook, "")
    return RuleExplanation(
        rule.name,
        rule.playbook,
        _matches(rule),
        outcome,
        would,
        actuation,
        source,
        tuple(why),
        grain,
    )


def explain(policy: Policy, *, force_shadow: bool = False) -> list[RuleExplanation]:
    """One explanation per rule, in the policy's order (the first matching rule per playbook
    does not shadow later ones: every matching rule decides)."""
    return [explain_rule(policy, r, force_shadow=force_shadow) for r in policy.rules]


def render(policy: Policy, source: str, explained: list[RuleExplanation]) -> str:
    live = [e for e in explained if e.actuation is Actuation.LIVE]
    head = [
        f"policy {source}: actuation {policy.actuation.value} at the top level; "
        f"{len(live)} of {len(explained)} rules live",
    ]
    if not live:
        head.append("nothing is written to Kubernetes: every decision is journaled as shadow")
    lines = [*head, ""]
    for e in explained:
        shadow = f" (shadow; live it {e.would.value})" if e.would is not e.outcome else ""
        lines.append(f"{e.rule}: {e.outcome.value.upper()}{shadow}")
        lines.append(f"    {e.playbook} on {e.matches}")
        if e.grain and e.would is not Outcome.NOTIFY:
            lines.append(f"    grain: {e.grain}")
        lines += [f"    {w}" for w in e.why]
    if not explained:
        lines.append("(no rules: incidents are tracked, nothing is decided)")
    return "\n".join(lines)
