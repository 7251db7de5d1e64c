"""`gpufleet pause` / `gpufleet resume`: stop (and restart) all automatic remediation.

While paused the engine still watches, opens incidents and asks for approvals, but nothing is
written to Kubernetes — not even an interrupted drain moves on — until someone resumes.
"""

from __future__ import annotations

import argparse
import getpass
import time
from typing import Any

from gpufleet.config import add_arguments, load_all, open_store


def register(sub: Any) -> None:
    for name, help_text in (
        ("pause", "pause all automatic remediation"),
        ("resume", "resume automatic remediation"),
    ):
        p: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=__doc__)
        p.add_argument("--reason", default="", help="why (recorded in the audit log)")
        p.add_argument("--by", help="who (default: the current user)")
        add_arguments(p)
        p.set_defaults(func=run, paused=name == "pause")


def run(args: argparse.Namespace) -> int:
    cfg, _policy = load_all(args)
    store = open_store(cfg)
    try:
        store.set_paused(args.paused, args.by or getpass.getuser(), args.reason, time.time())
        state = store.engine_state()
        print(f"cluster {cfg.cluster}: automation {'paused' if state.paused else 'running'}")
        return 0
    finally:
        store.close()
