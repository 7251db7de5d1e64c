"""The doctor's checks, each a few lines over the same parts `gpufleet run` starts with.

Nothing here writes: Prometheus gets one collection cycle, Kubernetes gets reads and
SelfSubjectAccessReviews, the store is connected to and its schema revision read, Slack gets
`auth.test` and `conversations.info`, Alertmanager its health endpoint.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterable

from alerts.slack_client import SlackApi
from database.engine import schema_revisions
from database.handle import Database
from errors import GpufleetError
from gpufleet.config import GpufleetConfig
from gpufleet.coverage_report import coverage_report
from gpufleet.doctor.check_table import FAIL, OK, SKIP, WARN, Check
from gpufleet.doctor.kube_checks import kubernetes_checks
from gpufleet.service.cluster_claim import recorded
from gpufleet.service.sources import prometheus_settings
from observer.fleet.field_presence import snapshot_fields
from observer.fleet.model import FleetSnapshot
from observer.prometheus.collector import PrometheusCollector
from observer.snapshot import unjoined_gpus
from remediations.policy import Policy


def prometheus_checks(cfg: GpufleetConfig) -> list[Check]:
    src = cfg.service.source.prometheus
    if src is None:
        return [Check("prometheus", SKIP, f"source is {cfg.service.source.chosen() or 'none'}")]
    settings = prometheus_settings(cfg.service.source, cfg.cluster, src)
    try:
        with PrometheusCollector(settings) as c:
            r = c.collect()
            layouts = sorted(c.pod_layouts)
    except GpufleetError as exc:
        return [
            Check(
                "prometheus",
                FAIL,
                f"{src.url}: {exc.message}",
                exc.hint or "check service.source.prometheus (URL, credentials, TLS)",
            )
        ]
    snap = r.snapshot
    out = [
        Check(
            "prometheus",
            OK if snap.gpus else FAIL,
            f"{src.url}: {len(snap.gpus)} GPUs, {r.stats.query_count} queries, "
            f"{r.stats.seconds:.2f} s",
            "no DCGM_FI_DEV_FB_USED series: is dcgm-exporter scraped by this Prometheus?",
        )
    ]
    out += _coverage_checks(snap)
    out.append(
        Check(
            "label layout",
            WARN if layouts == ["none"] else OK,
            f"workload pod labels: {', '.join(layouts) or 'none'}",
            "enable dcgm-exporter's Kubernetes pod mapping (pod labels) or set "
            "pod_labels: none to attribute GPUs by node",
        )
    )
    out.append(node_join_check(snap))
    out.append(
        Check(
            "kube-state-metrics",
            OK if snap.nodes else WARN,
            f"{len(snap.nodes)} nodes, {len(snap.pods)} pods in Prometheus",
            "install kube-state-metrics (kube-prometheus-stack ships it); the service "
            "reads the Kubernetes API too, backfilled history needs it",
        )
    )
    return out


def _coverage_checks(snap: FleetSnapshot) -> list[Check]:
    """Which DCGM fields detectors read are missing, and which detectors that weakens."""
    cov = coverage_report(snapshot_fields(snap))
    missing = list(cov.fields.missing)
    reduced = {d: s for d, s in cov.states().items() if s != "full"}
    return [
        Check(
            "dcgm fields",
            WARN if missing else OK,
            f"missing: {', '.join(missing)}" if missing else "every field detectors read",
            "add the fields to dcgm-exporter's counters CSV (docs/detectors.md)",
        ),
        Check(
            "detectors",
            WARN if reduced else OK,
            ", ".join(f"{d}: {s}" for d, s in sorted(reduced.items()))
            or "every detector on full evidence",
            "see `dcgm fields`; detectors on reduced evidence say so in findings",
        ),
    ]


def node_join_check(snap: FleetSnapshot) -> Check:
    """GPUs whose exporter's `Hostname` joined no Kubernetes node (observer.snapshot.node_join):
    kept under their hostname, but no node action or drain can reach them."""
    unjoined = unjoined_gpus(snap)
    if not unjoined:
        return Check("node join", OK, "every GPU joins a Kubernetes node")
    hosts = "; ".join(f"{h} ({n} GPUs)" for h, n in sorted(unjoined.items()))
    return Check(
        "node join",
        WARN,
        f"{sum(unjoined.values())} GPUs on no Kubernetes node: {hosts}",
        "set NODE_NAME on dcgm-exporter (fieldRef spec.nodeName; the GPU Operator and the chart "
        "do), or relabel kubernetes_node from __meta_kubernetes_pod_node_name",
    )


def store_check(cfg: GpufleetConfig) -> list[Check]:
    db = Database.open(cfg.store_url, cfg.cluster, migrate=False)
    where = cfg.store_url.split("@")[-1]  # never a password
    try:
        current, head = schema_revisions(db.engine)
        owner = recorded(db) if current == head else None
    except Exception as exc:
        return [
            Check(
                "store",
                FAIL,
                f"{where}: {type(exc).__name__}: {str(exc)[:160]}",
                "check DATABASE_URL / store_url and that the database accepts connections",
            )
        ]
    finally:
        db.close()
    if current != head:
        return [
            Check(
                "store",
                WARN,
                f"{where}: schema {current or 'empty'}, shipped {head}",
                "gpufleet run migrates it at start (it needs CREATE on the database)",
            )
        ]
    mine = (
        f"; cluster {cfg.cluster!r} recorded for kube-system {owner.kube_system_uid}"
        if owner
        else ""
    )
    return [Check("store", OK, f"{where}: schema {head}{mine}")]


def slack_checks(cfg: GpufleetConfig, source: str | None) -> list[Check]:
    acfg = cfg.alerts.relative_to(source)
    token = acfg.secret("token") if acfg.enabled else None
    if not token:
        return [Check("slack", SKIP, "no bot token: messages go to the log and the store")]
    api = SlackApi(token, acfg.slack.base_url, timeout=acfg.slack.timeout)
    try:
        who = api.call("auth.test", {})
    except GpufleetError as exc:
        return [
            Check(
                "slack",
                WARN,
                f"auth.test: {exc.message}",
                "check SLACK_BOT_TOKEN (a bot token, xoxb-) and slack.base_url",
            )
        ]
    if not who.get("ok"):
        return [
            Check(
                "slack",
                WARN,
                f"auth.test: {who.get('error')}",
                "check SLACK_BOT_TOKEN (a bot token, xoxb-)",
            )
        ]
    out = [Check("slack", OK, f"bot {who.get('user')} in team {who.get('team')}")]
    for ch in _channels(acfg.slack.default_channel, (r.channel for r in acfg.slack.routes)):
        out.append(_channel(api, ch))
    return out


def _channels(default: str, routes: Iterable[str]) -> list[str]:
    return list(dict.fromkeys([default, *routes]))


def _channel(api: SlackApi, ch: str) -> Check:
    name = f"slack {ch}"
    if ch.startswith("#"):
        return Check(
            name,
            WARN,
            "named by name: membership not checked",
            "name channels by ID (C...) so doctor can check the bot is in them",
        )
    try:
        info = api.call("conversations.info", {"channel": ch})
    except GpufleetError as exc:
        return Check(name, WARN, exc.message, "check the channel ID and the bot's scopes")
    if not info.get("ok"):
        return Check(name, WARN, str(info.get("error")), "check the channel ID")
    member = bool((info.get("channel") or {}).get("is_member"))
    return Check(
        name,
        OK if member else WARN,
        "bot is a member" if member else "bot not in it",
        f"/invite the bot to {ch}",
    )


def alertmanager_check(cfg: GpufleetConfig) -> list[Check]:
    url = cfg.alerts.alertmanager.url
    if not cfg.alerts.enabled or not url:
        return [Check("alertmanager", SKIP, "no alerts.alertmanager.url")]
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/-/healthy", timeout=5) as r:
            ok = r.status == 200
    except OSError as exc:
        return [
            Check(
                "alertmanager",
                WARN,
                f"{url}: {exc}",
                "check alerts.alertmanager.url; alerts wait in the outbox meanwhile",
            )
        ]
    return [Check("alertmanager", OK if ok else WARN, f"{url}: healthy" if ok else url)]


def run_checks(cfg: GpufleetConfig, policy: Policy, source: str | None) -> list[Check]:
    return [
        *prometheus_checks(cfg),
        *kubernetes_checks(cfg, policy),
        *store_check(cfg),
        *slack_checks(cfg, source),
        *alertmanager_check(cfg),
    ]
