"""`gpufleet doctor --config F`: the first command to run on a cluster, before `gpufleet run`.

Checks what the service needs with the config's own settings and prints one row per check with
the fix for each that did not pass (gpufleet.doctor). Exit codes: 0 nothing would stop the
service (warnings are reduced function), 1 something would (`FAIL` rows), 2 the config or
policy is invalid.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from gpufleet.config import add_arguments, load_all
from gpufleet.doctor.check_table import FAIL, table
from gpufleet.doctor.checks import run_checks


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "doctor",
        help="check Prometheus, Kubernetes RBAC, DRA, the store, Slack and Alertmanager",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.log_level != "DEBUG":  # one row per problem says it; no retry chatter
        for name in ("urllib3", "observer.prometheus.collector", "alerts.slack_client"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    cfg, policy = load_all(args)  # ConfigError -> exit 2 in gpufleet.cli
    checks = run_checks(cfg, policy, args.config)
    print(table(checks))
    return 1 if any(c.status == FAIL for c in checks) else 0
