"""`gpufleet simulate`: a scenario as OpenMetrics for backfill (+ ground truth), or served live.

The OpenMetrics mode feeds `promtool tsdb create-blocks-from openmetrics`; `--serve` starts the
simulated exporters and Kubernetes API (simulator/serve.py) on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path
from typing import Any

from errors import ConfigError
from simulator.engine import FleetSimulator
from simulator.layout import build_layout
from simulator.openmetrics import OpenMetricsWriter
from simulator.scenario import (
    DEMO_SCENARIO,
    Scenario,
    load_scenario,
    parse_duration,
    parse_time,
)
from simulator.truth import ground_truth, write_truth

UNIX_SECONDS_FLOOR = 1e9
"""Plain numbers at least this large are unix seconds; smaller ones are offsets."""


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "simulate",
        help="simulate a GPU fleet: OpenMetrics for backfill, or live endpoints",
        description=(
            "Simulate a GPU fleet from a scenario file. Write OpenMetrics for "
            "`promtool tsdb create-blocks-from openmetrics` plus the ground truth, or serve "
            "dcgm-exporter, kube-state-metrics and a Kubernetes API live on 127.0.0.1."
        ),
    )
    p.add_argument("--scenario", help="scenario YAML (default: the built-in demo scenario)")
    out = p.add_argument_group("backfill output")
    out.add_argument("--openmetrics", metavar="OUT", help="write OpenMetrics text to OUT")
    out.add_argument("--truth", metavar="TRUTH.json", help="write the ground truth (JSON)")
    out.add_argument(
        "--start",
        metavar="T",
        help="first sample: unix seconds, RFC 3339, or an offset like 30m (default: start)",
    )
    out.add_argument("--end", metavar="T", help="last sample, same forms (default: the end)")
    out.add_argument(
        "--step", metavar="S", help="seconds between samples (default: scrape_interval)"
    )
    p.add_argument(
        "--pod-labels", choices=("direct", "exported", "none"), default="direct",
        help="where DCGM series name the workload: pod/namespace (direct), exported_pod/"
        "exported_namespace beside the exporter's own labels (exported), or "
        "nowhere (none: the exporter's Kubernetes mapping off)",
    )  # fmt: skip
    out.add_argument(
        "--shipped-fields", action="store_true",
        help="only the fields dcgm-exporter's shipped counters file turns on (no ECC, NVLink "
        "error counters or throttle reasons)",
    )  # fmt: skip
    live = p.add_argument_group("live mode")
    live.add_argument("--serve", action="store_true", help="serve the fleet live on 127.0.0.1")
    live.add_argument(
        "--metrics-port", type=int, default=9400, metavar="P", help="exporters (0: any free)"
    )
    live.add_argument(
        "--k8s-port", type=int, default=6443, metavar="P", help="Kubernetes API (0: any free)"
    )
    live.add_argument("--kubeconfig-out", metavar="FILE", help="write a kubeconfig for kubectl")
    live.add_argument(
        "--speed",
        type=float,
        default=1.0,
        metavar="X",
        help="scenario seconds per wall-clock second (default 1)",
    )
    p.set_defaults(func=run, _parser=p)


def resolve_time(value: str, sc: Scenario) -> float:
    """Unix seconds, RFC 3339, or an offset from the scenario start (`90`, `30m`)."""
    try:
        number = float(value)
    except ValueError:
        number = None
    if number is not None:
        return number if number >= UNIX_SECONDS_FLOOR else sc.start + number
    try:
        return sc.start + parse_duration(value)
    except ValueError:
        pass
    return parse_time(value)


class _Progress:
    """Progress on stderr at most every few seconds, so short runs stay quiet."""

    def __init__(self, every: float = 3.0) -> None:
        self.every = every
        self.last = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last >= self.every and done < total:
            self.last = now
            pct = 100 * done // total
            print(f"gpufleet simulate: {done}/{total} steps ({pct}%)", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    path = Path(args.scenario) if args.scenario else DEMO_SCENARIO
    sc = load_scenario(path)
    if args.serve:
        return _serve(sc, args)
    if not (args.openmetrics or args.truth):
        args._parser.error("give --openmetrics OUT and/or --truth FILE, or --serve")
    try:
        layout = build_layout(sc)
        sim = FleetSimulator(sc, layout)
        times = [resolve_time(v, sc) if v else None for v in (args.start, args.end)]
        step = parse_duration(args.step) if args.step else None
    except ConfigError as exc:
        raise ConfigError(str(path), exc.problems) from None
    except ValueError as exc:
        problem = "expected unix seconds, an RFC 3339 time or an offset like 30m"
        raise ConfigError("command line", [f"--start/--end/--step: {problem} ({exc})"]) from None
    if step is not None and step <= 0:
        raise ConfigError("command line", ["--step: expected a positive duration"])
    if layout.unplaced:
        print(f"gpufleet simulate: not placed: {', '.join(layout.unplaced)}", file=sys.stderr)
    if args.truth:
        write_truth(args.truth, ground_truth(sc, layout))
    if args.openmetrics:
        writer = OpenMetricsWriter(
            sim, pod_labels=args.pod_labels, shipped_fields_only=args.shipped_fields
        )
        stats = writer.write(args.openmetrics, times[0], times[1], step, progress=_Progress())
        print(
            f"gpufleet simulate: wrote {stats.samples} samples over {stats.steps} steps "
            f"({stats.bytes / 1e6:.1f} MB) to {args.openmetrics} in {stats.seconds:.1f} s",
            file=sys.stderr,
        )
    return 0


def _serve(sc: Scenario, args: argparse.Namespace) -> int:
    try:
        serve = importlib.import_module("simulator.serve")
    except ModuleNotFoundError as exc:
        if exc.name != "simulator.serve":
            raise
        print(
            "gpufleet simulate: error: live mode is not available in this build "
            "(simulator/serve.py is missing)",
            file=sys.stderr,
        )
        return 1
    result = serve.run_server(
        sc,
        metrics_port=args.metrics_port,
        k8s_port=args.k8s_port,
        kubeconfig_out=args.kubeconfig_out,
        speed=args.speed,
        pod_labels=args.pod_labels,
    )
    return int(result or 0)
