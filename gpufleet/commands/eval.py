"""`gpufleet eval`: score the detectors and the static alert rules on a suite of scenarios.

Each scenario file in the suite directory is simulated, backfilled into a throwaway local
Prometheus (the Debian `prometheus` and `promtool` binaries), replayed through the Prometheus
collector as `gpufleet backtest` does, and scored against its ground truth: recall and median
time to detect per fault kind, precision, F1, false positives per confounder kind — for the
detectors and, side by side, for the four static dcgm-exporter rules teams run today.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from errors import ConfigError, GpufleetError
from gpufleet.children import die_with_this_process
from gpufleet.config import detector_suite, load_config
from lab.local_prometheus import LocalPrometheusError, require_binaries
from lab.scorecard import report
from lab.suite_eval import evaluate_suite, scenario_files, stderr_log

EXIT_OK = 0
EXIT_TARGETS = 1
EXIT_USAGE = 2
EXIT_PROMETHEUS = 3
EPILOG = """exit codes:
  0  scored; the detectors meet the issue's targets (precision and recall >= 0.95, >= 0.9 per
     fault kind, no warning/critical finding on a confounder)
  1  scored; some target missed (the table's last line says which)
  2  usage error: no such suite directory, an invalid scenario file or --config (the message
     names file, field and expectation)
  3  the local Prometheus could not run: prometheus/promtool missing (install the Debian
     package prometheus, or run `make test` which installs it), backfill or start failed

examples:
  gpufleet eval --suite lab/suite
  gpufleet eval --suite lab/suite --format json --output eval.json
  gpufleet eval --suite lab/suite --lookback-delta 1m
  gpufleet eval --suite lab/sweeps     # fault-size sweeps around each detector's limit
"""


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "eval",
        help="score the detectors (and the static alert rules) on a suite of scenarios",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--suite", metavar="DIR", required=True, help="directory of scenario YAMLs")
    p.add_argument("--output", "-o", metavar="FILE", help="also write the scores as JSON")
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="what to print on stdout (table)")  # fmt: skip
    p.add_argument("--config", metavar="FILE", help="gpufleet config (YAML; `detectors:` section)")
    p.add_argument("--lookback-delta", metavar="D",
                   help="Prometheus --query.lookback-delta (default: Prometheus' 5m)")  # fmt: skip
    p.set_defaults(func=run, _parser=p)


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwinds through the `finally` that stops Prometheus


def run(args: argparse.Namespace) -> int:
    if args.log_level != "DEBUG":
        logging.getLogger("urllib3").setLevel(logging.ERROR)
    files = scenario_files(args.suite)  # ConfigError -> exit 2 in gpufleet.cli
    cfg, path = load_config(args.config)
    suite, grace = detector_suite(cfg, str(path or "<defaults>"))
    if args.output and not Path(args.output).parent.is_dir():
        args._parser.error(f"--output: directory {str(Path(args.output).parent)!r} does not exist")
    try:
        require_binaries()
    except LocalPrometheusError as exc:
        print(f"gpufleet eval: error: {exc}", file=sys.stderr)
        return EXIT_PROMETHEUS
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        result = evaluate_suite(
            args.suite, suite, grace, args.lookback_delta, stderr_log, files,
            child_setup=die_with_this_process(),  # a kill -9 leaves no Prometheus behind
        )  # fmt: skip
    except LocalPrometheusError as exc:
        print(f"gpufleet eval: error: {exc}", file=sys.stderr)
        return EXIT_PROMETHEUS
    except ConfigError:
        raise  # a scenario file is wrong: exit 2 with its problems in gpufleet.cli
    except GpufleetError as exc:
        print(f"gpufleet eval: error: the local Prometheus stopped answering: {exc.render()}",
              file=sys.stderr)  # fmt: skip
        return EXIT_PROMETHEUS
    finally:
        signal.signal(signal.SIGTERM, previous)
    doc = result.to_json()
    if args.output:
        Path(args.output).write_text(json.dumps(doc, indent=1) + "\n")
        stderr_log(f"wrote {args.output}")
    print(json.dumps(doc, indent=1) if args.format == "json" else report(result))
    return EXIT_TARGETS if result.misses() else EXIT_OK
