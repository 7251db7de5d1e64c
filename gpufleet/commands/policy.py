"""`gpufleet policy explain`: what each rule of the policy would do, and why.

Per rule: whether it acts automatically, awaits approval, or only notifies — from its `mode`, its
`actuation` (shadow or live; the rule's own, else the policy's; `shadow: true` in the gpufleet
config forces shadow) and the budgets an automatic action must still pass; then per scheduled job
of the config's `service.schedule` its actuation (a job has no rule: the policy's top level).
Reads the config and
the policy only (no journal, no cluster); an invalid file exits 2 naming the file and field.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gpufleet.config import GpufleetConfig, add_arguments, config_path, load_all, load_config
from remediations.explain import explain, render
from remediations.policy import DEFAULT_POLICY, Policy
from remediations.types import Actuation


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "policy", help="explain what the remediation policy would do", description=__doc__
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    ex = verbs.add_parser("explain", help="per rule: automatic, awaits approval, or notify only")
    ex.add_argument("--format", choices=["text", "json"], default="text")
    add_arguments(ex)
    p.set_defaults(func=run)


def _source(args: argparse.Namespace) -> str:
    """Which policy file `load_all` read (for the heading)."""
    if args.policy is not None:
        return str(args.policy)
    cfg, path = load_config(config_path(args.config))
    if cfg.policy is not None:
        return str((path.parent if path is not None else Path.cwd()) / cfg.policy)
    return f"{DEFAULT_POLICY} (shipped default)"


WRITES_NOTHING = frozenset({"daily_report"})
"""Scheduled job kinds that never write to Kubernetes (they write the store only)."""


def explain_schedules(cfg: GpufleetConfig, policy: Policy) -> list[dict[str, Any]]:
    """Per enabled `service.schedule` entry: its actuation and what that means. A scheduled job
    has no rule, so it follows the policy's top-level actuation (`shadow: true` forces
    shadow); a policy live only in some rules keeps every scheduled job in shadow."""
    shadow = cfg.shadow or policy.actuation is Actuation.SHADOW
    source = (
        "the gpufleet config (shadow: true forces shadow)"
        if cfg.shadow
        else f"the policy's top level (actuation: {policy.actuation.value}; a job has no rule)"
    )
    out: list[dict[str, Any]] = []
    for e in cfg.service.schedule:
        if not e.enabled:
            continue
        if e.kind in WRITES_NOTHING:
            why = "writes the store only, never Kubernetes"
            actuation = "n/a"
        elif shadow:
            why = (
                f"actuation: shadow, from {source}: journals 'shadow: would ...'; writes nothing "
                "to Kubernetes"
            )
            actuation = Actuation.SHADOW.value
        else:
            why = f"actuation: live, from {source}: acts through the policy's gates and budgets"
            actuation = Actuation.LIVE.value
        out.append(
            {
                "schedule": e.name,
                "kind": e.kind,
                "cron": e.cron,
                "timezone": e.timezone,
                "actuation": actuation,
                "why": why,
            }
        )
    return out


def run(args: argparse.Namespace) -> int:
    cfg, policy = load_all(args)
    explained = explain(policy, force_shadow=cfg.shadow)
    schedules = explain_schedules(cfg, policy)
    if args.format == "json":
        doc = {
            "policy": _source(args),
            "actuation": policy.actuation.value,
            "forced_shadow": cfg.shadow,
            "rules": [e.to_json() for e in explained],
            "schedules": schedules,
        }
        print(json.dumps(doc, indent=2))
    else:
        print(render(policy, _source(args), explained))
        if schedules:
            print("\nscheduled jobs (service.schedule; no rule: the policy's top-level actuation)")
        for s in schedules:
            print(f"schedule {s['schedule']} ({s['kind']}, `{s['cron']}` {s['timezone']}):")
            print(f"    {s['why']}")
    return 0
