"""`gpufleet incidents list|show`: what gpufleet found, from the journal, worst first.

`list` shows open incidents (critical, then warning, then info; newest first within each) and,
with `--all`, the resolved ones of the `--since` window after them; `show ID` prints one
incident with its evidence and what happened to it (decisions, actions, transitions). IDs may
be abbreviated to any unique prefix. `--json` keeps the raw records.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from gpufleet.commands.audit import since
from gpufleet.commands.readable import age, readable_incident
from gpufleet.config import add_arguments, open_journal
from remediations.store import IncidentRecord
from remediations.types import IncidentStatus

EXIT_NOT_FOUND = 1
RANK = {"critical": 0, "warning": 1, "info": 2}


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "incidents", help="list or show incidents (worst first)", description=__doc__
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    ls = verbs.add_parser("list", help="open incidents, worst first")
    ls.add_argument("--all", action="store_true", help="resolved ones too (within --since)")
    ls.add_argument("--since", default="24h", help="with --all: how far back (default 24h)")
    ls.add_argument("--json", action="store_true", help="raw records as JSON")
    show = verbs.add_parser("show", help="one incident: evidence and what happened to it")
    show.add_argument("id")
    show.add_argument("--json", action="store_true", help="the raw record and trail as JSON")
    for v in (ls, show):
        add_arguments(v)
    p.set_defaults(func=run)


def worst_first(incidents: list[IncidentRecord]) -> list[IncidentRecord]:
    return sorted(
        incidents,
        key=lambda i: (i.status is not IncidentStatus.OPEN, RANK.get(i.severity, 3), -i.opened_at),
    )


def _json(i: IncidentRecord) -> dict[str, Any]:
    return {
        "id": i.id, "cluster": i.cluster, "kind": i.kind, "status": i.status.value,
        "severity": i.severity, "summary": i.summary, "node": i.node, "gpu_uuid": i.gpu_uuid,
        "job": i.job, "opened_at": i.opened_at, "last_seen": i.last_seen,
        "resolved_at": i.resolved_at, "last_decision": i.last_decision,
        "evidence": dict(i.evidence),
    }  # fmt: skip


def run(args: argparse.Namespace) -> int:
    now = time.time()
    _cfg, _policy, store = open_journal(args)
    try:
        if args.verb == "list":
            found = store.incidents(since(args.since, now)) if args.all else store.open_incidents()
            rows = worst_first(found)
            if args.json:
                print(json.dumps([_json(i) for i in rows], indent=2))
                return 0
            if not rows:
                print("no open incidents" + ("" if args.all else " (--all: resolved ones too)"))
                return 0
            print(f"{'ID':<12} {'SEVERITY':<9} {'STATUS':<9} {'KIND':<16} {'WHERE':<28} OPENED")
            for i in rows:
                where = i.job or i.node or "fleet"
                print(
                    f"{i.id[:12]:<12} {i.severity:<9} {i.status.value:<9} {i.kind:<16} "
                    f"{where[:28]:<28} {age(i.opened_at, now)}  {i.summary[:80]}"
                )
            return 0
        hits = store.find_incidents(args.id)
        if len(hits) != 1:
            what = "no incident" if not hits else f"{len(hits)} incidents"
            print(f"gpufleet: {what} with id {args.id!r}", file=sys.stderr)
            return EXIT_NOT_FOUND
        inc = hits[0]
        records = [r for r in store.audit_log() if r.incident_id == inc.id]
        if args.json:
            print(json.dumps({**_json(inc), "audit": [r.to_json() for r in records]}, indent=2))
        else:
            print(readable_incident(inc, records, now))
        return 0
    finally:
        store.close()
