"""`gpufleet audit [--since T] [--format jsonl|table]`: the append-only audit log.

Every gate decision, approval, transition and Kubernetes write, oldest first. `--since` takes
unix seconds, RFC 3339, or a duration back from now (`1h`, `30m`, `2d`).
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from typing import Any

from errors import ConfigError
from gpufleet.config import add_arguments, open_journal
from observer.fleet.units import parse_duration, parse_time


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "audit", help="print the remediation audit log", description=__doc__
    )
    p.add_argument("--since", metavar="T", help="unix seconds, RFC 3339, or a duration ago")
    p.add_argument("--format", choices=["jsonl", "table"], default="table")
    add_arguments(p)
    p.set_defaults(func=run)


def since(value: str | None, now: float) -> float | None:
    if value is None:
        return None
    try:
        return now - parse_duration(value)
    except ValueError:
        pass
    try:
        return parse_time(value)
    except ValueError:
        raise ConfigError(
            "--since", [f"expected unix seconds, RFC 3339 or a duration like '1h' (got {value!r})"]
        ) from None


def run(args: argparse.Namespace) -> int:
    start = since(args.since, time.time())
    _cfg, _policy, store = open_journal(args)
    try:
        for r in store.audit_log(since=start):
            if args.format == "jsonl":
                print(json.dumps(r.to_json(), sort_keys=True))
            else:
                when = datetime.fromtimestamp(r.at, UTC).strftime("%Y-%m-%d %H:%M:%S")
                ident = (r.action_id or r.incident_id or "")[:12]
                print(f"{when}  {r.kind:<11} {r.actor:<12} {ident:<12} {r.message}")
        return 0
    finally:
        store.close()
