"""The direct-scrape collector (embedded mode): scrape exporters ourselves, no Prometheus.

For small teams without Prometheus. Every cycle GETs all targets concurrently (per-target
timeout), parses the text format (observer.scrape.exposition), keeps a bounded rolling window of
counter samples per series (observer.scrape.ring_window) for reset-aware increases, and hands the
same
columns as the Prometheus path to the one snapshot builder, so both modes yield equal snapshots.

- A target that fails keeps its last page for `inventory_window` seconds, with the old sample
  time: its node reads stale in TelemetryHealth (`up` False), the rest of the fleet is fresh.
- Every target failing raises errors.TemporaryError (no snapshot is invented); some failing
  name themselves in `TelemetryHealth.degraded_reason` (the source still answers, so
  `source_ok` stays True) for the live cycle to say out loud; they are logged at DEBUG here.
- Malformed lines are skipped and counted; each target's first bad page is logged once.
- Sample times are the collector's clock at the scrape (`now` is injectable, e.g. a
  simulator's scenario clock), not the exporter's.

Memory: per counter series `16 * capacity` bytes (capacity 8: 128 B); with dcgm-exporter's
six counter families that is ~0.8 KB per GPU, plus the last page's parsed samples.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from errors import TemporaryError
from observer.fleet.catalog import (
    BY_NAME,
    LABEL_HOSTNAME,
    LABEL_HOSTNAME_NEW,
    XID_COUNT_METRIC,
    Kind,
)
from observer.fleet.model import Event, FleetSnapshot, Node, Pod
from observer.scrape.exposition import PageParser, ParsedPage
from observer.scrape.fetch import discover, fetch_all, new_session
from observer.scrape.ring_window import RingWindow
from observer.snapshot.builder import BuildReport, SnapshotBuilder
from observer.snapshot.cycle_stats import CycleStats, QueryStat
from observer.snapshot.inputs import (
    NODE_HINT_LABELS,
    ExporterHealth,
    GpuColumns,
    MetricSeries,
    PodSeries,
    fill_zero,
    str_column,
)
from observer.snapshot.job_identity import DEFAULT_JOB_LABEL_KEYS, JobIdentity
from observer.snapshot.kube_records import KSM_STATUS_FAMILIES, records_from_series

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ScrapeSettings:
    targets: tuple[str, ...] = ()
    """Exporter URLs. Empty: ask `discovery_url` each cycle."""
    discovery_url: str = ""
    timeout: float = 2.0
    concurrency: int = 16
    window: float = 120.0
    capacity: int = 8
    """Samples kept per counter series; >= window / scrape interval + 1."""
    inventory_window: float = 900.0
    job_label_keys: tuple[str, ...] = DEFAULT_JOB_LABEL_KEYS
    cluster: str = "default"


@dataclass(slots=True)
class _Target:
    page: ParsedPage | None = None
    at: float = float("nan")
    node: str = ""
    ok: bool = False
    malformed_total: int = 0
    warned: bool = False
    inventory: dict[str, tuple[dict[str, str], float]] = field(default_factory=dict)
    """GPU key -> (labels, last seen): a GPU that vanished from the page stays a row."""


@dataclass(frozen=True, slots=True)
class ScrapeResult:
    snapshot: FleetSnapshot
    stats: CycleStats
    report: BuildReport
    malformed: int = 0
    """Malformed lines skipped this cycle, over all targets."""


@dataclass(slots=True)
class _Columns:
    rows: list[dict[str, str]] = field(default_factory=list)
    stamps: list[float] = field(default_factory=list)
    gpu: dict[str, tuple[list[str], list[float], list[float]]] = field(default_factory=dict)


@dataclass(slots=True)
class _Pages:
    """What the targets' latest pages hold, gathered into one fleet's worth of rows."""

    cols: _Columns = field(default_factory=_Columns)
    steps: list[tuple[str, str, float, float]] = field(default_factory=list)
    kube: list[dict[str, Any]] = field(default_factory=list)
    status: list[dict[str, Any]] = field(default_factory=list)
    up: dict[str, bool] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)
    lost: list[tuple[dict[str, str], float]] = field(default_factory=list)
    sharers: list[tuple[Mapping[str, str], float]] = field(default_factory=list)

    def add(self, st: _Target, page: ParsedPage) -> None:
        """One target's latest page: its exporter's health, GPU rows, series, pods' steps."""
        cols = self.cols
        if st.node:
            self.up[st.node] = st.ok
            self.last[st.node] = st.at
        for key, (labels, seen) in st.inventory.items():
            if key in page.identity:
                cols.rows.append(labels)
                cols.stamps.append(seen)
            else:
                self.lost.append((labels, seen))
        self.sharers += [(lab, st.at) for rows in page.sharers.values() for lab in rows]
        for fam, (keys, vals, _) in page.gpu.items():
            k, v, ts = cols.gpu.setdefault(fam, ([], [], []))
            k.extend(keys)
            v.extend(vals)
            ts.extend([st.at] * len(keys))
        self.steps += [(ns, pod, x, st.at) for ns, pod, x in page.steps]
        for n, lab, x in page.kube:
            row = {"metric": {"__name__": n, **lab}, "value": [st.at, repr(x)]}
            if n not in KSM_STATUS_FAMILIES:
                self.kube.append(row)
            elif x == 1:
                self.status.append(row)

    def close_rows(self) -> None:
        """Append the rows without data: vanished GPUs, then pods sharing a GPU."""
        cols = self.cols
        cols.rows += [labels for labels, _ in self.lost]  # vanished GPUs: rows, no data
        cols.stamps += [seen for _, seen in self.lost]
        cols.rows += [dict(labels) for labels, _ in self.sharers]  # then pods sharing a GPU
        cols.stamps += [seen for _, seen in self.sharers]


class ScrapeCollector:
    def __init__(
        self,
        settings: ScrapeSettings,
        *,
        now: Callable[[], float] = time.time,
        discover: Callable[[], Sequence[str] | Mapping[str, str]] | None = None,
    ) -> None:
        self.settings = settings
        self.now = now
        self.discover = discover
        """Lists the exporter URLs each cycle (the Kubernetes way: pods by label from the
        service's watch cache), or maps each to its exporter pod's node; used when `settings`
        names no targets or discovery URL."""
        self._target_nodes: dict[str, str] = {}
        self.builder = SnapshotBuilder(
            JobIdentity(tuple(settings.job_label_keys)), settings.cluster
        ).with_pod_cache()
        self.counters = RingWindow(settings.capacity, settings.inventory_window)
        self.steps = RingWindow(settings.capacity, settings.inventory_window)
        self._targets: dict[str, _Target] = {}
        self._parser = PageParser()
        self._cycles: deque[float] = deque(maxlen=settings.capacity)
        self._session = new_session(settings.concurrency)
        self._pool = ThreadPoolExecutor(max(1, settings.concurrency), "scrape")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._session.close()

    def __enter__(self) -> ScrapeCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def window_bytes(self) -> int:
        return self.counters.nbytes + self.steps.nbytes

    def target_urls(self) -> list[str]:
        s = self.settings
        if s.targets:
            return list(s.targets)
        if self.discover is not None and not s.discovery_url:
            found = self.discover()
            if isinstance(found, Mapping):  # URL -> the exporter pod's node (watch cache)
                self._target_nodes = {u: n for u, n in found.items() if n}
            urls = list(found)
            if not urls:
                raise TemporaryError(
                    "no dcgm-exporter pod found (none running with an IP matches the selectors)",
                    source="kubernetes",
                    hint="check service.source.kubernetes: namespaces, labels and ports",
                )
            return urls
        try:
            return discover(self._session, s.discovery_url, s.timeout)
        except Exception as exc:
            raise TemporaryError(
                f"cannot list scrape targets at {s.discovery_url}: {exc}",
                source=s.discovery_url,
                hint="check the targets URL",
            ) from None

    def collect(
        self,
        *,
        nodes: Sequence[Node] | None = None,
        pods: Sequence[Pod] | None = None,
        events: Iterable[Event] = (),
    ) -> ScrapeResult:
        began = time.perf_counter()
        urls = self.target_urls()
        t = self.now()
        fetched = fetch_all(self._pool, self._session, urls, self.settings.timeout)
        s = self.settings
        stats: list[QueryStat] = []
        problems: list[str] = []
        malformed = 0
        for f in fetched:
            st = self._targets.setdefault(f.url, _Target())
            st.ok = f.text is not None
            if f.text is None:
                problems.append(f"target {f.url} failed: {f.error}")
                stats.append(QueryStat(f.url, f.seconds, f.bytes, f.bytes, 0, False, f.error))
                continue
            page = self._parser.parse(f.text)
            malformed += page.malformed
            st.malformed_total += page.malformed
            if page.malformed and not st.warned:
                st.warned = True
                log.warning("target %s: %d malformed line(s) skipped (first: %s); further "
                            "malformed lines of this target are counted, not logged",
                            f.url, page.malformed, page.first_error)  # fmt: skip
            st.page, st.at = page, t
            node = self._target_nodes.get(f.url, "")
            if node:  # as Prometheus' pod discovery relabels `kubernetes_node` (node_join)
                _stamp_node(page, node)
            for key, labels in page.identity.items():
                st.inventory[key] = (dict(labels), t)
            for key in [
                k for k, (_, seen) in st.inventory.items() if t - seen > s.inventory_window
            ]:
                del st.inventory[key]
            st.node = node or _node_of(page) or st.node
            self._push(page, t)
            stats.append(QueryStat(f.url, f.seconds, f.bytes, f.bytes, page.samples, True))
        if urls and not any(self._targets[u].ok for u in urls):
            raise TemporaryError(
                f"no scrape target answered ({len(urls)} tried; first: {problems[0]})",
                source=urls[0],
                hint="check the exporter URLs and that the exporters are running",
            )
        for p in problems:
            log.debug("scrape: %s", p)
        self._cycles.append(t)
        self.counters.expire(t)
        self.steps.expire(t)
        snap, report = self._build(t, urls, nodes, pods, events, "; ".join(problems))
        took = time.perf_counter() - began
        return ScrapeResult(
            snap, CycleStats(tuple(stats), took, tuple(problems)), report, malformed
        )

    def _push(self, page: ParsedPage, t: float) -> None:
        for fam, (keys, vals, _) in page.gpu.items():
            spec = BY_NAME.get(fam)
            if spec is not None and spec.kind == Kind.COUNTER:
                self.counters.push([f"{fam}|{k}" for k in keys], t, np.asarray(vals))
        if page.steps:
            keys = [f"{ns}/{pod}" for ns, pod, _ in page.steps]
            self.steps.push(keys, t, np.array([v for _, _, v in page.steps]))

    def _build(
        self,
        t: float,
        urls: Sequence[str],
        nodes: Sequence[Node] | None,
        pods: Sequence[Pod] | None,
        events: Iterable[Event],
        problems: str = "",
    ) -> tuple[FleetSnapshot, BuildReport]:
        pages = _Pages()
        for url in urls:
            st = self._targets[url]
            if st.page is None or not t - st.at <= self.settings.inventory_window:
                continue
            pages.add(st, st.page)
        pages.close_rows()
        cols = pages.cols
        gpus = GpuColumns.from_label_dicts(cols.rows, cols.stamps)
        metrics = self._metrics(cols, t)
        n_paged = len(cols.rows) - len(pages.lost)  # rows of GPUs on their target's latest page
        metrics[XID_COUNT_METRIC] = fill_zero(metrics.get(XID_COUNT_METRIC), gpus, n_paged)
        ksm_nodes, ksm_pods = records_from_series(pages.kube, pages.status, ())
        exporters = ExporterHealth(
            up=pages.up,
            last_scrape=pages.last,
            sample_times=[np.array(self._cycles)],
            degraded_reason=problems[:2000],
        )
        return self.builder.build_with_report(
            t,
            gpus,
            metrics,
            nodes=list(nodes) if nodes is not None else ksm_nodes,
            pods=list(pods) if pods is not None else ksm_pods,
            steps=self._steps(pages.steps, t),
            exporters=exporters,
            events=events,
        )

    def _metrics(self, cols: _Columns, t: float) -> dict[str, MetricSeries]:
        out: dict[str, MetricSeries] = {}
        for fam, (keys, vals, stamps) in cols.gpu.items():
            uuid, mig = _split_keys(keys)
            value = np.asarray(vals, dtype=np.float64)
            stamp = np.asarray(stamps, dtype=np.float64)
            spec = BY_NAME.get(fam)
            if spec is not None and spec.kind == Kind.COUNTER:
                inc = self.counters.increase([f"{fam}|{k}" for k in keys], t, self.settings.window)
                out[fam] = MetricSeries(value, stamp, uuid, mig, increase=inc,
                                        window_seconds=self.settings.window)  # fmt: skip
            else:
                out[fam] = MetricSeries(value, stamp, uuid, mig)
        return out

    def _steps(self, rows: list[tuple[str, str, float, float]], t: float) -> PodSeries | None:
        if not rows:
            return None
        keys = [f"{ns}/{pod}" for ns, pod, _, _ in rows]
        return PodSeries(
            namespace=str_column([r[0] for r in rows]),
            pod=str_column([r[1] for r in rows]),
            value=np.array([r[2] for r in rows]),
            timestamp=np.array([r[3] for r in rows]),
            increase=self.steps.increase(keys, t, self.settings.window),
        )


NODE_LABEL = NODE_HINT_LABELS[-1]
"""`kubernetes_node`: the label the snapshot reads as the exporter pod's `spec.nodeName`."""


def _stamp_node(page: ParsedPage, node: str) -> None:
    """The page's GPUs labelled with their exporter pod's node (`kubernetes_node`)."""
    page.identity = {k: {**lab, NODE_LABEL: node} for k, lab in page.identity.items()}
    page.sharers = {
        k: [{**lab, NODE_LABEL: node} for lab in rows] for k, rows in page.sharers.items()
    }


def _node_of(page: ParsedPage) -> str:
    for labels in page.identity.values():
        host = labels.get(LABEL_HOSTNAME) or labels.get(LABEL_HOSTNAME_NEW)
        if host:
            return host
    return ""


def _split_keys(keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    parts = [k.split("/", 1) for k in keys]
    uuid = str_column([p[0] for p in parts])
    mig = str_column([p[1] if len(p) > 1 else "" for p in parts])
    return uuid, mig
