"""`gpufleet alerts intake list|clear`: the Alertmanager alerts gpufleet holds as findings.

`list` shows each held alert, whether it counts now (firing and delivered within the staleness
window) and what finding it becomes under the policy's `intake.allow`. `clear` forgets alerts
(all with `--all`, or by `--fingerprint`), for instance one whose "resolved" delivery was lost;
their findings stop at the next cycle and the clearing is journaled in the audit log.
"""

from __future__ import annotations

import argparse
import getpass
import time
from datetime import UTC, datetime
from typing import Any

from alerts.am_intake import Intake
from gpufleet.config import add_arguments, load_all, open_store


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "alerts", help="the Alertmanager alerts held as findings", description=__doc__
    )
    groups = p.add_subparsers(dest="group", metavar="GROUP", required=True)
    intake = groups.add_parser("intake", help="alerts received by the Alertmanager webhook")
    verbs = intake.add_subparsers(dest="verb", metavar="VERB", required=True)
    listing = verbs.add_parser("list", help="held alerts, whether they count, what they become")
    clear = verbs.add_parser("clear", help="forget held alerts (their findings stop)")
    which = clear.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every held alert")
    which.add_argument(
        "--fingerprint", action="append", metavar="FP", help="this alert (repeatable)"
    )
    clear.add_argument("--by", help="who (default: the current user)")
    for v in (listing, clear):
        add_arguments(v)
    p.set_defaults(func=run)


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run(args: argparse.Namespace) -> int:
    cfg, policy = load_all(args)
    store = open_store(cfg)
    now = time.time()
    intake = Intake(
        cfg.alerts.alertmanager.intake, store, started_at=now, allows=policy.intake.allows
    )
    try:
        if args.verb == "clear":
            fps = None if args.all else list(args.fingerprint)
            n = intake.clear(fps)
            who = args.by or getpass.getuser()
            what = "all held alerts" if fps is None else ", ".join(fps)
            store.audit(now, "intake_clear", f"{who} cleared {what} ({n})", actor=who)
            print(f"cluster {cfg.cluster}: {n} alert(s) cleared")
            return 0
        rows = intake.held()
        if not rows:
            print(f"cluster {cfg.cluster}: no alerts held")
            return 0
        live = {r.fingerprint for r in intake.firing(now)}
        print(
            "FINGERPRINT       ALERTNAME             NODE          COUNTS  BECOMES            "
            "STARTED               LAST DELIVERY         DELIVERIES"
        )
        for r in rows:
            f = intake.finding(r)
            if r.fingerprint in live:
                counts = "yes"
            elif r.status != "firing" or (r.ends_at is not None and r.ends_at <= now):
                counts = "ended"
            else:
                counts = "stale"
            becomes = f"{f.kind.value}/{f.severity.value}"
            print(
                f"{r.fingerprint:<17} {r.labels.get('alertname', '')[:21]:<21} "
                f"{(f.node or '-')[:13]:<13} {counts:<7} {becomes:<18} {_utc(r.starts_at)}  "
                f"{_utc(r.updated_at)}  {r.deliveries}"
            )
        return 0
    finally:
        store.close()
