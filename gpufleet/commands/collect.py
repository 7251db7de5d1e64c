"""`gpufleet collect`: one collection cycle, printed as a summary or dumped as JSON.

From Prometheus (`--prometheus-url`, optionally `--at T` for a past instant) or by scraping
exporters directly (`--scrape URL...` or `--targets URL` listing them), optionally with the
Kubernetes API (`--kubeconfig`) for nodes, pods and GPU/node Warning events. `--config` names
the gpufleet config whose cluster and `service.source.job_label_keys` apply, so pods group into
jobs as the running service groups them.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from errors import GpufleetError, TemporaryError
from gpufleet.config import GpufleetConfig, load_config
from gpufleet.coverage_report import coverage_report
from observer.fleet.field_presence import snapshot_fields
from observer.fleet.model import Event, FleetSnapshot, Node, Pod
from observer.prometheus.plan import POD_LABEL_MODES, POD_LABELS_HELP
from observer.snapshot.json_dump import snapshot_to_dict
from observer.snapshot.summary import summarize

EXIT_OK = 0
EXIT_TEMPORARY = 1
EXIT_USAGE = 2
EXIT_PERMANENT = 3
EXIT_DEGRADED = 4
EPILOG = """exit codes:
  0  snapshot collected completely
  1  no snapshot: the source is unreachable, timing out or overloaded (temporary; retry)
  2  usage error (bad arguments, unreadable kubeconfig, an invalid --config)
  3  no snapshot: the source refused (bad URL path, credentials, rejected query; permanent)
  4  snapshot collected but degraded (some queries or targets failed; the summary says which)

examples:
  gpufleet collect --prometheus-url http://prometheus:9090 --summary
  gpufleet collect --prometheus-url http://prometheus:9090 --at 2026-01-01T00:10:00Z -o snap.json
  gpufleet collect --targets http://127.0.0.1:9400/targets --rounds 3 --interval 15
  gpufleet collect --scrape http://node-1:9400/metrics http://node-2:9400/metrics
"""


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "collect",
        help="collect one FleetSnapshot (Prometheus or direct scrape) and summarise or dump it",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prometheus-url", metavar="URL", help="Prometheus-compatible HTTP API")
    src.add_argument("--scrape", nargs="+", metavar="URL", help="exporter /metrics URLs")
    src.add_argument("--targets", metavar="URL", help="a URL listing exporter URLs (JSON)")
    p.add_argument("--at", metavar="T", help="unix seconds or RFC 3339 (Prometheus only)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--summary", action="store_true", help="print a summary (the default)")
    out.add_argument("--output", "-o", metavar="FILE", help="write the snapshot as JSON")
    p.add_argument("--kubeconfig", metavar="F", help="also read nodes/pods/events from the API")
    p.add_argument("--config", metavar="FILE",
                   help="gpufleet config (YAML; its cluster and job-name label keys)")  # fmt: skip
    p.add_argument("--pod-labels", choices=POD_LABEL_MODES, default="auto",
                   help=POD_LABELS_HELP)  # fmt: skip
    p.add_argument("--timeout", type=float, default=10.0, metavar="S", help="per request (10)")
    p.add_argument("--window", type=float, default=120.0, metavar="S",
                   help="counter increase window in seconds (120)")  # fmt: skip
    p.add_argument("--rounds", type=int, default=1, metavar="N",
                   help="direct scrape: rounds to run (>= 2 gives counter increases)")  # fmt: skip
    p.add_argument("--interval", type=float, default=15.0, metavar="S",
                   help="direct scrape: seconds between rounds (15)")  # fmt: skip
    p.set_defaults(func=run, _parser=p)


def parse_at(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        pass
    dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def _kube(args: argparse.Namespace) -> Any:
    from observer.kube.collector import KubeCollector, KubeSettings

    kube = KubeCollector(KubeSettings(kubeconfig=args.kubeconfig, watch_timeout=30)).start()
    if not kube.wait_synced(args.timeout):
        kube.stop()
        raise TemporaryError(
            f"the Kubernetes API of {args.kubeconfig} did not answer within {args.timeout:g} s",
            hint="check --kubeconfig and that the API server is reachable",
        )
    return kube


def _collect(
    args: argparse.Namespace,
    cfg: GpufleetConfig,
    k8s: tuple[list[Node], list[Pod], list[Event]] | None,
) -> tuple[FleetSnapshot, tuple[str, ...], str]:
    from gpufleet.service.sources import named_prometheus, prometheus_settings, scrape_settings

    nodes, pods, events = k8s if k8s is not None else (None, None, [])
    section = cfg.service.source  # read as the service reads it: its job-name label keys
    if args.prometheus_url:
        from observer.prometheus.collector import PrometheusCollector
        from observer.prometheus.parse import pod_labels_note

        at = parse_at(args.at) if args.at else None
        given = named_prometheus(args.prometheus_url, timeout=args.timeout, window=args.window,
                                 pod_labels=args.pod_labels)  # fmt: skip
        settings = prometheus_settings(section, cfg.cluster, given)
        with PrometheusCollector(settings) as c:
            r = c.collect(at, nodes=nodes, pods=pods, events=events)
        stats = r.stats
        kb = stats.bytes_body / 1e3
        cost = f"{stats.query_count} queries, {kb:.0f} kB JSON, {stats.seconds:.2f} s"
        cost += "; " + pod_labels_note(c.pod_layouts)
        return r.snapshot, stats.problems, cost
    from observer.scrape.collector import ScrapeCollector

    named = scrape_settings(section, cfg.cluster, tuple(args.scrape or ()), args.targets or "")
    settings_s = replace(named, timeout=args.timeout, window=args.window)
    with ScrapeCollector(settings_s) as sc:
        for _ in range(max(1, args.rounds) - 1):
            sc.collect()
            time.sleep(args.interval)
        rs = sc.collect(nodes=nodes, pods=pods, events=events)
    st = rs.stats
    cost = f"{st.query_count} targets, {st.bytes_body / 1e3:.0f} kB, {st.seconds:.2f} s"
    if rs.malformed:
        cost += f", {rs.malformed} malformed lines skipped"
    return rs.snapshot, rs.stats.problems, cost


def run(args: argparse.Namespace) -> int:
    if args.log_level != "DEBUG":  # urllib3 logs every retry; our error says it once
        logging.getLogger("urllib3").setLevel(logging.ERROR)
    if args.at and not args.prometheus_url:
        args._parser.error("--at needs --prometheus-url (direct scrape sees only the present)")
    if args.at:
        try:
            parse_at(args.at)
        except ValueError:
            args._parser.error(f"--at: expected unix seconds or RFC 3339, got {args.at!r}")
    if args.kubeconfig and not Path(args.kubeconfig).is_file():
        args._parser.error(f"--kubeconfig: no such file {args.kubeconfig!r}")
    cfg, _ = load_config(args.config)  # ConfigError -> exit 2 in gpufleet.cli
    kube = None
    try:
        k8s = None
        if args.kubeconfig:
            kube = _kube(args)
            k8s = (kube.nodes(), kube.pods(), kube.events())
        snapshot, problems, cost = _collect(args, cfg, k8s)
    except GpufleetError as exc:
        print(f"gpufleet collect: error: {exc.render()}", file=sys.stderr)
        return EXIT_TEMPORARY if exc.temporary else EXIT_PERMANENT
    finally:
        if kube is not None:
            kube.stop()
    source = args.prometheus_url or args.targets or f"{len(args.scrape)} exporters"
    if args.output:
        Path(args.output).write_text(json.dumps(snapshot_to_dict(snapshot)) + "\n")
        print(f"gpufleet collect: wrote {args.output} ({len(snapshot.gpus)} GPUs; {cost})",
              file=sys.stderr)  # fmt: skip
    else:
        print(summarize(snapshot, source))
        print("\n".join(coverage_report(snapshot_fields(snapshot)).lines()))
        print(f"cost: {cost}")
    for p in problems:
        print(f"gpufleet collect: warning: {p}", file=sys.stderr)
    return EXIT_DEGRADED if problems else EXIT_OK
