"""`gpufleet demo`: the first thing a new user runs, and another name for `gpufleet run --embedded`.

The live demo scenario (`simulator/demo-live.yaml`, the one `make demo` runs) served on 127.0.0.1
(exporters, kube-state-metrics and a Kubernetes API) two minutes before its first fault, at 1x on
the wall clock, and the production service on it (gpufleet.demo.embedded): collectors ->
detectors -> incidents -> policy -> actions -> Kubernetes, the demo's schedule, the dashboard,
printed as it happens. Same flags and wiring as `gpufleet run --embedded`.
"""

from __future__ import annotations

import argparse
from typing import Any

from gpufleet.commands.run import add_embedded_arguments, run_embedded
from gpufleet.config import add_arguments


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="run gpufleet on a simulated GPU fleet (the same as `gpufleet run --embedded`)",
        description=(
            "Serve the built-in demo fleet live on 127.0.0.1 (dcgm-exporter pages per node, "
            "kube-state-metrics, training steps and a Kubernetes API that kubectl can use) and "
            "run the gpufleet service on it: collectors, detectors, incidents, policy, actions, "
            "Kubernetes writes and scheduled jobs, printed as they happen. Another name for "
            "`gpufleet run --embedded`, with the same flags."
        ),
    )
    add_arguments(p)
    add_embedded_arguments(p)
    p.set_defaults(func=run_embedded, embedded=True, check_config=False)
