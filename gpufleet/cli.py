"""The `gpufleet` command: one argparse tree, one module per subcommand in gpufleet/commands/.

Errors a person can fix (a bad scenario, config or policy) print what is wrong and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from errors import ConfigError
from gpufleet import __version__

EXIT_USAGE = 2
COMMAND_MODULES = (
    "gpufleet.commands.version",
    "gpufleet.commands.simulate",
    "gpufleet.commands.demo",
    "gpufleet.commands.collect",
    "gpufleet.commands.actions",
    "gpufleet.commands.incidents",
    "gpufleet.commands.pause",
    "gpufleet.commands.diagnostics",
    "gpufleet.commands.breaker",
    "gpufleet.commands.alerts",
    "gpufleet.commands.audit",
    "gpufleet.commands.detect",
    "gpufleet.commands.backtest",
    "gpufleet.commands.eval",
    "gpufleet.commands.policy",
    "gpufleet.commands.run",
    "gpufleet.commands.doctor",
    "gpufleet.commands.dashboard",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpufleet",
        description="Observability and SRE automation for Kubernetes GPU fleets.",
    )
    parser.add_argument("--version", action="version", version=f"gpufleet {__version__}")
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log verbosity (default INFO)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"gpufleet: error: {exc.render()}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `gpufleet audit | head`: the reader left; not an error worth a stack trace.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
