"""`gpufleet policy explain`: what each rule of the policy would do, and why.

Per rule: whether it acts automatically, awaits approval, or only notifies — from its `mode`, its
`actuation` (shadow or live; the rule's own, else the policy's; `dry_run: true` in the gpufleet
config forces shadow) and the budgets an automatic action must still pass. Reads the config and
the policy only (no journal, no cluster); an invalid file exits 2 naming the file and field.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from gpufleet.config import add_arguments, load_all, load_config
from remediations.explain import explain, render
from remediations.policy import DEFAULT_POLICY


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
    cfg, path = load_config(args.config)
    if cfg.policy is not None:
        return str((path.parent if path is not None else Path.cwd()) / cfg.policy)
    return f"{DEFAULT_POLICY} (shipped default)"


def run(args: argparse.Namespace) -> int:
    cfg, policy = load_all(args)
    explained = explain(policy, force_shadow=cfg.dry_run)
    if args.format == "json":
        doc = {
            "policy": _source(args),
            "actuation": policy.actuation.value,
            "forced_shadow": cfg.dry_run,
            "rules": [e.to_json() for e in explained],
        }
        print(json.dumps(doc, indent=2))
    else:
        print(render(policy, _source(args), explained))
    return 0
