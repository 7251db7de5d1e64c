"""`gpufleet diagnostics list|waive`: the journal's diagnostic verdicts, and a person's override.

gpufleet returns a node or GPU to service only on a diagnostic that passed after its latest
fault or repair. When the diagnostic itself cannot run (the DCGM image is broken, the registry is
down) a person who has checked the hardware another way may waive it: `waive node/<name>` or
`waive gpu/<uuid>` journals a `waived` verdict with their name and reason (both required), and
the next `diagnose_and_return` run proposes the return through the same gates as a pass. A
waiver covers only what gpufleet did before it: a fault after it needs a new diagnostic.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from datetime import UTC, datetime
from typing import Any

from gpufleet.config import add_arguments, load_all, open_store
from remediations.validation import DIAGNOSTIC, record_diagnosis

EXIT_USAGE = 2


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "diagnostics",
        help="list diagnostic verdicts, or waive one (a journaled override)",
        description=__doc__,
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    ls = verbs.add_parser("list", help="verdicts, oldest first")
    ls.add_argument("target", nargs="?", help="only this node/<name> or gpu/<uuid>")
    ls.add_argument("--format", choices=["table", "json"], default="table")
    w = verbs.add_parser("waive", help="vouch for a node or GPU whose diagnostic cannot run")
    w.add_argument("target", help="node/<name> or gpu/<uuid>")
    w.add_argument("--node", help="the GPU's node (for gpu/<uuid>; recorded)")
    w.add_argument("--reason", required=True, help="why it is safe (recorded in the audit log)")
    w.add_argument("--by", help="who vouches (default: the current user)")
    for v in (ls, w):
        add_arguments(v)
    p.set_defaults(func=run)


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")


def run(args: argparse.Namespace) -> int:
    if args.verb == "waive":
        kind, _, name = args.target.partition("/")
        if kind not in ("node", "gpu") or not name:
            print(
                f"gpufleet: target must be node/<name> or gpu/<uuid>, not {args.target!r}",
                file=sys.stderr,
            )
            return EXIT_USAGE
        if not args.reason.strip():
            print("gpufleet: --reason must say why the hardware is safe", file=sys.stderr)
            return EXIT_USAGE
    cfg, _policy = load_all(args)
    store = open_store(cfg)
    try:
        if args.verb == "waive":
            who = args.by or getpass.getuser()
            node = args.node or (args.target[5:] if args.target.startswith("node/") else "")
            record_diagnosis(
                store, time.time(), args.target, "waived", node=node, actor=who, note=args.reason
            )
            print(f"{args.target}: diagnostic waived by {who}")
            return 0
        rows = [r for r in store.audit_log() if r.kind == DIAGNOSTIC]
        if args.target:
            rows = [r for r in rows if r.target == args.target]
        if args.format == "json":
            print(json.dumps([r.to_json() for r in rows], indent=2))
            return 0
        for r in rows:
            print(f"{_when(r.at)}  {r.target:<50} {r.detail.get('outcome', ''):<7} {r.actor}")
        return 0
    finally:
        store.close()
