"""`gpufleet backtest`: replay the detectors and the policy (dry-run) over a past window.

Snapshots come from Prometheus at every step through the live collector (chunked range
queries), the detector suite runs on each in time order, findings are merged into one per
continuous episode per entity and kind, and the remediation policy (shipped default or
`--policy`) decides on them in dry-run: nothing is written anywhere but OUT.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from backtesting.backtest import Progress, iso, step_count
from backtesting.backtest_sharded import backtest_sharded, default_shards, shards_worth
from backtesting.sharded import warmup_seconds
from errors import GpufleetError
from gpufleet.commands.time_args import parse_duration_arg, parse_time_arg
from gpufleet.config import detector_suite, load_all
from gpufleet.service.sources import named_prometheus, prometheus_settings
from observer.prometheus.plan import POD_LABEL_MODES, POD_LABELS_HELP

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_NO_DATA = 3
EPILOG = """OUT.json (issue 4's contract):
  {"findings": [{"kind", "severity", "node", "gpu_uuid", "job", "first_seen", "last_seen",
                 "summary", "evidence", "recommended_action"}],
   "actions":  [{"playbook", "target", "decided_at", "decision": "execute|await_approval|deny",
                 "reasons"}]}
  one finding per continuous episode per entity and kind; evidence.detected_at is when the
  detector first said so (first_seen is the onset it inferred).

exit codes:
  0  OUT.json written (whatever it found)
  2  usage error: bad arguments, or an invalid --config/--policy (the message names file,
     field and expectation)
  3  Prometheus unreachable, timing out or refusing the queries; OUT.json is not written

examples:
  gpufleet backtest --prometheus-url http://prometheus:9090 \\
      --start 2026-01-01T00:00:00Z --end 2026-01-02T00:00:00Z --step 30s --output out.json
  gpufleet backtest --prometheus-url http://prometheus:9090 --start 1767225600 \\
      --end 1767229200 --policy policy.yaml --config gpufleet.yaml --output out.json
"""


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "backtest",
        help="replay the detectors and the policy (dry-run) over a past window of Prometheus",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--prometheus-url", metavar="URL", required=True,
                   help="Prometheus-compatible HTTP API holding the window")  # fmt: skip
    p.add_argument("--start", metavar="T0", required=True, help="unix seconds or RFC 3339")
    p.add_argument("--end", metavar="T1", required=True, help="unix seconds or RFC 3339")
    p.add_argument("--step", default="15s", metavar="D", help="evaluation step (15s)")
    p.add_argument("--config", metavar="FILE", help="gpufleet config (YAML; `detectors:` section)")
    p.add_argument("--policy", metavar="FILE", help="remediation policy (YAML); default shipped")
    p.add_argument("--output", "-o", metavar="OUT.json", required=True, help="where to write")
    p.add_argument("--pod-labels", choices=POD_LABEL_MODES, default="auto",
                   help=POD_LABELS_HELP)  # fmt: skip
    p.add_argument("--shards", type=int, default=default_shards(), metavar="N",
                   help="replay the window in N time shards on N processes (default: one per "
                        "two CPUs here, as each keeps its sample parsers and Prometheus busy "
                        "too; 1: sequential); fewer when the window is too short for the "
                        "detectors' warm-up to pay off")  # fmt: skip
    p.add_argument("--timeout", type=float, default=30.0, metavar="S",
                   help="per request (30; range requests are larger than live ones)")  # fmt: skip
    p.set_defaults(func=run, _parser=p)


def _write(path: Path, doc: dict[str, Any]) -> None:
    """Write atomically: a reader never sees half a file, a failed run leaves none."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)


def run(args: argparse.Namespace) -> int:
    if args.log_level != "DEBUG":
        logging.getLogger("urllib3").setLevel(logging.ERROR)
    parser: argparse.ArgumentParser = args._parser
    start = parse_time_arg(parser, "--start", args.start)
    end = parse_time_arg(parser, "--end", args.end)
    step = parse_duration_arg(parser, "--step", args.step)
    if end < start:
        parser.error(f"--end ({iso(end)}) is before --start ({iso(start)})")
    if args.shards < 1:
        parser.error(f"--shards: expected a whole number >= 1, got {args.shards}")
    out = Path(args.output)
    if not out.parent.is_dir():
        parser.error(f"--output: directory {str(out.parent)!r} does not exist")
    cfg, policy = load_all(args)  # ConfigError -> exit 2 in gpufleet.cli
    suite, grace = detector_suite(cfg, str(args.config or "<defaults>"))
    given = named_prometheus(args.prometheus_url, timeout=args.timeout, pod_labels=args.pod_labels)
    settings = prometheus_settings(cfg.service.source, cfg.cluster, given)  # as the service reads
    total = step_count(start, end, step)
    shards = shards_worth(args.shards, end - start, warmup_seconds(suite))
    print(f"gpufleet backtest: {iso(start)} .. {iso(end)} every {step:g} s ({total} steps), "
          f"{len(suite.detectors)} detectors, {shards} shard(s)", file=sys.stderr)  # fmt: skip
    try:
        result = backtest_sharded(
            settings, start, end, step, suite, grace, policy, shards, Progress(total)
        )
    except GpufleetError as exc:
        print(f"gpufleet backtest: error: {exc.render()}; {out} not written", file=sys.stderr)
        return EXIT_NO_DATA
    _write(out, result.to_json())
    print(f"gpufleet backtest: wrote {out}: {result.summary()}", file=sys.stderr)
    return EXIT_OK
