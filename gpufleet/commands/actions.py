"""`gpufleet actions list|show|approve|reject`: the journal's actions, and people's decisions.

Approving moves an action from awaiting_approval to approved (the runner then re-checks every
gate before it acts); rejecting closes it for good for that incident. Actions in state `shadow`
(decided under `actuation: shadow`) show what gpufleet would have done; they never run and
cannot be approved. Both are audited with the
person's name. IDs may be abbreviated to any unique prefix.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from datetime import UTC, datetime
from typing import Any

from gpufleet.commands.readable import readable
from gpufleet.config import add_arguments, open_journal
from remediations.decision_journal import DecisionJournal
from remediations.store import ActionRecord, Store
from remediations.types import ActionState

EXIT_NOT_FOUND = 1


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "actions", help="list, show, approve or reject remediation actions", description=__doc__
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    ls = verbs.add_parser("list", help="list actions (newest last)")
    ls.add_argument(
        "--state",
        action="append",
        choices=[s.value for s in ActionState],
        help="only these states (repeatable)",
    )
    ls.add_argument("--format", choices=["table", "json"], default="table")
    show = verbs.add_parser("show", help="one action with its plan and audit trail")
    show.add_argument("id")
    show.add_argument("--json", action="store_true", help="the raw record and trail as JSON")
    for verb in ("approve", "reject"):
        v = verbs.add_parser(verb, help=f"{verb} an action awaiting approval")
        v.add_argument("id")
        v.add_argument("--by", help="who decides (default: the current user)")
        v.add_argument("--reason", default="", help="why (recorded in the audit log)")
    for v in (ls, show, *[verbs.choices[n] for n in ("approve", "reject")]):
        add_arguments(v)
    p.set_defaults(func=run)


def _when(t: float | None) -> str:
    return "-" if t is None else datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _find(store: Store, ident: str) -> ActionRecord | None:
    hits = store.find_actions(ident)
    if len(hits) != 1:
        what = "no action" if not hits else f"{len(hits)} actions"
        print(f"gpufleet: {what} with id {ident!r}", file=sys.stderr)
        return None
    return hits[0]


def run(args: argparse.Namespace) -> int:
    _cfg, policy, store = open_journal(args)
    try:
        if args.verb == "list":
            states = [ActionState(s) for s in args.state] if args.state else None
            actions = store.actions(states)
            if args.format == "json":
                print(json.dumps([a.to_json() for a in actions], indent=2))
                return 0
            print(f"{'ID':<12} {'STATE':<17} {'PLAYBOOK':<14} {'TARGET':<32} {'MODE':<8} CREATED")
            for a in actions:
                shadow = f"  {a.result}" if a.state is ActionState.SHADOW else ""
                print(
                    f"{a.id[:12]:<12} {a.state.value:<17} {a.playbook:<14} {a.target[:32]:<32} "
                    f"{a.mode.value:<8} {_when(a.created_at)}{shadow}"
                )
            return 0
        found = _find(store, args.id)
        if found is None:
            return EXIT_NOT_FOUND
        a = found
        if args.verb == "show":
            records = [r for r in store.audit_log() if r.action_id == a.id]
            if args.json:
                trail = [r.to_json() for r in records]
                print(json.dumps({**a.to_json(), "audit": trail}, indent=2))
            else:
                print(readable(a, records))
            return 0
        who = args.by or getpass.getuser()
        journal = DecisionJournal(policy, store, started_at=time.time())
        try:
            if args.verb == "approve":
                done = journal.approve(a.id, who, time.time())
            else:
                done = journal.reject(a.id, who, time.time(), args.reason)
        except ValueError as exc:
            print(f"gpufleet: {exc}", file=sys.stderr)
            return EXIT_NOT_FOUND
        if done.state is ActionState.EXPIRED:
            print(f"{done.id}: not approved, {done.result}", file=sys.stderr)
            return EXIT_NOT_FOUND
        print(f"{done.id}: {done.state.value} by {who}")
        return 0
    finally:
        store.close()
