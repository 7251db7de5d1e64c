"""`gpufleet breaker status|reset`: the circuit breaker that stops all automatic actions.

It trips when findings touch more than the policy's share of the GPU fleet within its window;
only a person resets it. Findings seen before the reset never act afterwards (NVSentinel #450).
"""

from __future__ import annotations

import argparse
import getpass
import time
from typing import Any

from gpufleet.config import add_arguments, load_all, open_store


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "breaker", help="show or reset the remediation circuit breaker", description=__doc__
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    status = verbs.add_parser("status", help="is the breaker tripped, and why")
    reset = verbs.add_parser("reset", help="reset a tripped breaker")
    reset.add_argument("--by", help="who (default: the current user)")
    for v in (status, reset):
        add_arguments(v)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg, _policy = load_all(args)
    store = open_store(cfg)
    try:
        if args.verb == "reset":
            was = store.reset_breaker(args.by or getpass.getuser(), time.time())
            print(f"cluster {cfg.cluster}: breaker reset" + ("" if was else " (was not tripped)"))
            return 0
        st = store.engine_state()
        if st.breaker_tripped:
            print(
                f"cluster {cfg.cluster}: breaker TRIPPED at {st.breaker_tripped_at}: "
                f"{st.breaker_reason}"
            )
        else:
            print(f"cluster {cfg.cluster}: breaker closed")
        return 0
    finally:
        store.close()
