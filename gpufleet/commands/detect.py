"""`gpufleet detect`: what is wrong with the fleet at T (default now), from Prometheus.

The live code path at one instant: the Prometheus collector and the detector suite. Detectors
that need persistence (a straggler for 2-4 minutes of evidence, a hang for 60 s) cannot fire on
a single snapshot, so by default the suite is first replayed over a short warm-up window ending
at T (`--warmup`, raw samples read once); `--warmup 0` is exactly one collection.
The findings reported are those of the cycle at T, with their episode's onset as first_seen.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from backtesting.backtest import current_findings, iso, replay_window
from detectors.findings import Finding, Severity
from errors import GpufleetError
from gpufleet.commands.time_args import parse_duration_arg, parse_time_arg
from gpufleet.config import detector_suite, load_config
from gpufleet.service.sources import named_prometheus, prometheus_settings
from observer.prometheus.collector import PrometheusCollector
from observer.prometheus.plan import POD_LABEL_MODES, POD_LABELS_HELP

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_NO_DATA = 3
FAIL_ON = {"critical": 2, "warning": 1, "info": 0, "never": 99}
EPILOG = """exit codes:
  0  detection ran; no finding at or above --fail-on (default: critical)
  1  detection ran; at least one finding at or above --fail-on
  2  usage error: bad arguments, or an invalid --config (the message names file, field, expectation)
  3  no snapshot: Prometheus is unreachable, timing out or refused the queries (the message
     says whether retrying may help)
Missing or partial telemetry is not an error: it is reported as a monitoring_gap finding.

examples:
  gpufleet detect --prometheus-url http://prometheus:9090
  gpufleet detect --prometheus-url http://prometheus:9090 --at 2026-01-01T00:10:00Z --format json
  gpufleet detect --prometheus-url http://prometheus:9090 --fail-on warning || page-someone
"""


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "detect",
        help="run the detectors on the fleet at one instant (from Prometheus) and list findings",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--prometheus-url", metavar="URL", required=True,
                   help="Prometheus-compatible HTTP API (Thanos, Mimir, ...)")  # fmt: skip
    p.add_argument("--at", metavar="T", help="unix seconds or RFC 3339 (default: now)")
    p.add_argument("--config", metavar="FILE", help="gpufleet config (YAML; `detectors:` section)")
    p.add_argument("--format", choices=("table", "json"), default="table", help="(table)")
    p.add_argument("--warmup", default="10m", metavar="D",
                   help="replay this long before T for persistence (10m; 0: off)")  # fmt: skip
    p.add_argument("--step", default="15s", metavar="D", help="warm-up step (15s)")
    p.add_argument("--fail-on", choices=tuple(FAIL_ON), default="critical",
                   help="lowest severity that makes the exit code 1 (critical)")  # fmt: skip
    p.add_argument("--pod-labels", choices=POD_LABEL_MODES, default="auto",
                   help=POD_LABELS_HELP)  # fmt: skip
    p.add_argument("--timeout", type=float, default=10.0, metavar="S", help="per request (10)")
    p.set_defaults(func=run, _parser=p)


def table(findings: list[Finding], at: float) -> str:
    if not findings:
        return f"no findings at {iso(at)}"
    order = sorted(findings, key=lambda f: (-f.severity.rank, f.kind.value, f.node or "",
                                            f.gpu_uuid or "", f.job or ""))  # fmt: skip
    rows = [("SEVERITY", "KIND", "ENTITY", "SINCE", "SUMMARY")]
    for f in order:
        entity = " ".join(x for x in (f.job, f.node, f.gpu_uuid) if x) or "fleet"
        rows.append((f.severity.value, f.kind.value, entity, iso(f.first_seen), f.summary))
    w = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [
        f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:<{w[2]}}  {r[3]:<{w[3]}}  {r[4]}" for r in rows
    ]
    counts = {s.value: sum(f.severity is s for f in findings) for s in Severity}
    lines.append(
        f"{len(findings)} findings at {iso(at)}: "
        + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.log_level != "DEBUG":  # urllib3 logs every retry; our error says it once
        logging.getLogger("urllib3").setLevel(logging.ERROR)
    parser: argparse.ArgumentParser = args._parser
    at = parse_time_arg(parser, "--at", args.at) if args.at else None
    warmup = parse_duration_arg(parser, "--warmup", args.warmup, allow_zero=True)
    step = parse_duration_arg(parser, "--step", args.step)
    cfg, path = load_config(args.config)  # ConfigError -> exit 2 in gpufleet.cli
    suite, grace = detector_suite(cfg, str(path or "<defaults>"))
    given = named_prometheus(args.prometheus_url, timeout=args.timeout, pod_labels=args.pod_labels)
    settings = prometheus_settings(cfg.service.source, cfg.cluster, given)  # as the service reads
    try:
        with PrometheusCollector(settings) as c:
            t = c.now() if at is None else at
            start = t - (warmup // step) * step if warmup > 0 else t
            run_ = replay_window(c, start, t, step, [(suite, grace)])
    except GpufleetError as exc:
        print(f"gpufleet detect: error: {exc.render()}", file=sys.stderr)
        return EXIT_NO_DATA
    findings = current_findings(run_)
    if args.format == "json":
        doc = {"at": t, "findings": [f.to_json() for f in findings]}
        print(json.dumps(doc, indent=1))
    else:
        print(table(findings, t))
    for reason in run_.degraded_reasons:
        print(f"gpufleet detect: warning: degraded data: {reason}", file=sys.stderr)
    worst = max((f.severity.rank for f in findings), default=-1)
    return EXIT_FINDINGS if worst >= FAIL_ON[args.fail_on] else EXIT_OK
