"""`gpufleet demo`: the first thing a new user runs — a simulated GPU fleet served live.

For now it starts the built-in demo scenario in serve mode (exporters, kube-state-metrics and a
Kubernetes API on 127.0.0.1), writes a kubeconfig and prints every endpoint with a ready-to-paste
kubectl line. Later issues grow it into the whole product (collectors, detectors, dashboard).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

from observer.simulator.scenario import DEMO_SCENARIO, load_scenario
from observer.simulator.serve import SimulationHandle, start_simulation, wait_for_signal

DEFAULT_KUBECONFIG = Path(".gpufleet") / "demo-kubeconfig"


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="run gpufleet on a simulated GPU fleet",
        description=(
            "Serve the built-in demo fleet live on 127.0.0.1: dcgm-exporter pages per node, "
            "kube-state-metrics, training steps and a Kubernetes API that kubectl can use."
        ),
    )
    p.add_argument("--scenario", help="scenario YAML (default: the built-in demo scenario)")
    p.add_argument(
        "--metrics-port", type=int, default=9400, metavar="P", help="exporters (0: any free)"
    )
    p.add_argument(
        "--k8s-port", type=int, default=6443, metavar="P", help="Kubernetes API (0: any free)"
    )
    p.add_argument(
        "--kubeconfig-out",
        default=str(DEFAULT_KUBECONFIG),
        metavar="FILE",
        help=f"where to write the kubeconfig (default {DEFAULT_KUBECONFIG})",
    )
    p.add_argument(
        "--speed",
        type=float,
        default=1.0,
        metavar="X",
        help="scenario seconds per wall-clock second (default 1)",
    )
    p.set_defaults(func=run)


def _start(args: argparse.Namespace) -> SimulationHandle:
    sc = load_scenario(Path(args.scenario) if args.scenario else DEMO_SCENARIO)
    try:
        return start_simulation(
            sc,
            metrics_port=args.metrics_port,
            k8s_port=args.k8s_port,
            kubeconfig_out=args.kubeconfig_out,
            speed=args.speed,
        )
    except OSError as exc:
        if args.metrics_port == 0 and args.k8s_port == 0:
            raise
        print(
            f"gpufleet demo: port {args.metrics_port} or {args.k8s_port} is taken "
            f"({exc.strerror or exc}); using free ports instead",
            file=sys.stderr,
        )
        return start_simulation(
            sc, metrics_port=0, k8s_port=0, kubeconfig_out=args.kubeconfig_out, speed=args.speed
        )


def banner(handle: SimulationHandle) -> str:
    kubectl = "kubectl"
    venv_kubectl = Path(sys.executable).parent / "kubectl"
    if shutil.which("kubectl") is None and venv_kubectl.exists():
        kubectl = str(venv_kubectl)
    kc = handle.kubeconfig
    return "\n".join(
        [
            "gpufleet demo: a simulated GPU fleet is live",
            "",
            handle.describe(),
            "",
            "try:",
            f"  {kubectl} --kubeconfig {kc} get nodes",
            f"  {kubectl} --kubeconfig {kc} get pods -A -o wide",
            f"  curl -s {handle.node_metrics_url(handle.layout.nodes[0].name)} | head",
            "",
            "Ctrl-C stops the demo.",
        ]
    )


def run(args: argparse.Namespace) -> int:
    handle = _start(args)
    print(banner(handle), flush=True)
    wait_for_signal(handle)
    return 0
