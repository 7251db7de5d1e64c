"""`gpufleet simulate`: a scenario as OpenMetrics for backfill (+ ground truth), or served live.

The OpenMetrics mode feeds `promtool tsdb create-blocks-from openmetrics`; `--serve` starts the
simulated exporters and Kubernetes API (observer/simulator/serve.py) on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "simulate",
        help="simulate a GPU fleet: OpenMetrics for backfill, or live endpoints",
        description="Simulate a GPU fleet from a scenario file.",
    )
    p.add_argument("--scenario", help="scenario YAML (default: the built-in demo scenario)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print("gpufleet simulate: not implemented yet", file=sys.stderr)
    return 1
