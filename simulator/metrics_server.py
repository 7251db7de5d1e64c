"""The live exporters of a simulated fleet on one HTTP server: what Prometheus would scrape.

`/nodes/<node>/metrics` is that node's dcgm-exporter, `/kube-state-metrics/metrics` and
`/jobs/metrics` (training_steps_total) the cluster-wide ones; `/targets` lists them (JSON, or
Prometheus file_sd with `?format=file_sd`). Every page is rendered from the metric engine at the
current scenario time with the pods where the simulated Kubernetes API has them *now*, so a
drained node's GPUs lose their pod labels. An exporter that the scenario takes down answers 503.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Collection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from simulator import mig_series
from simulator.cluster import SimCluster
from simulator.engine import FleetSimulator, Sample
from simulator.exposition import dcgm_text, kube_state_text, steps_text
from simulator.layout import SimPod

log = logging.getLogger(__name__)
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


class LiveMetrics:
    """Samples the engine at the cluster clock's scenario time, with the live placement."""

    def __init__(
        self,
        engine: FleetSimulator,
        cluster: SimCluster,
        max_age: float = 1.0,
        pod_labels: str = "direct",
        fields: Collection[str] | None = None,
    ) -> None:
        self.pod_labels = pod_labels
        self.fields = fields
        """The DCGM families the exporters serve (None: all; see simulator.exposition.dcgm_text)."""
        """simulator.series.POD_LABEL_LAYOUTS: `none` serves pages without pod labels (the
        exporter's Kubernetes mapping off), `exported` with `exported_*` labels."""
        self.engine = engine
        self.cluster = cluster
        self.max_age = max_age
        self._lock = threading.Lock()
        self._cached: tuple[float, int, Sample, list[SimPod]] | None = None

    def sample(self) -> tuple[Sample, list[SimPod]]:
        """(sample, placements) — reused for `max_age` wall seconds while nothing changed."""
        pods = self.cluster.pods_for_metrics()
        rv = self.cluster.store.resource_version
        t = self.cluster.clock.scenario_time()
        with self._lock:
            c = self._cached
            fresh = c is not None and time.monotonic() - c[0] < self.max_age
            step = self.engine.step_index
            if c is not None and fresh and c[1] == rv and step(c[2].t) == step(t):
                return c[2], c[3]  # reused within max_age, but never across scrape steps
            s = self.engine.sample(t, pods=pods)
            self._cached = (time.monotonic(), rv, s, pods)
            return s, pods

    def node_page(self, node: str) -> str | None:
        """The node's dcgm-exporter text, or None while its exporter is down."""
        s, _ = self.sample()
        pos = self.engine.layout.node_position()[node]
        if not s.scrape_ok or not bool(s.exporter_up[pos]):
            return None
        sc, layout = self.engine.scenario, self.engine.layout
        instances = mig_series.instances_at(sc, layout, s.t)
        return dcgm_text(s, layout, node, self.pod_labels, self.fields, sc.exporter, instances)

    def kube_state_page(self) -> str:
        s, pods = self.sample()
        uids = {
            f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["metadata"]["uid"]
            for p in self.cluster.store.objects("pods")[1]
        }
        return kube_state_text(
            s,
            self.engine.layout.nodes,
            pods,
            self.cluster.unschedulable_nodes(),
            self.cluster.scenario.cluster,
            uids,
            self.cluster.gpu_allocatable(),
        )

    def steps_page(self) -> str:
        s, pods = self.sample()
        return steps_text(s, pods)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: MetricsServer

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("metrics-sim %s", format % args)

    def _reply(self, status: int, body: str, content_type: str = TEXT_FORMAT) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        live = self.server.live
        try:
            parts = path.strip("/").split("/")
            if path == "/healthz":
                self._reply(200, "ok\n", "text/plain; charset=utf-8")
            elif len(parts) == 3 and parts[0] == "nodes" and parts[2] == "metrics":
                if parts[1] not in self.server.node_names:
                    self._reply(404, f"unknown node {parts[1]}\n", "text/plain; charset=utf-8")
                    return
                page = live.node_page(parts[1])
                if page is None:
                    self._reply(503, "exporter unavailable\n", "text/plain; charset=utf-8")
                else:
                    self._reply(200, page)
            elif path == "/kube-state-metrics/metrics":
                self._reply(200, live.kube_state_page())
            elif path == "/jobs/metrics":
                self._reply(200, live.steps_page())
            elif path == "/targets":
                fmt = parse_qs(url.query).get("format", ["urls"])[0]
                doc = self.server.file_sd() if fmt == "file_sd" else self.server.target_urls()
                self._reply(200, json.dumps(doc, indent=1) + "\n", "application/json")
            else:
                self._reply(404, "not found\n", "text/plain; charset=utf-8")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:
            log.exception("metrics-sim: GET %s failed", self.path)
            self._reply(500, f"internal error: {exc!r}\n", "text/plain; charset=utf-8")


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, live: LiveMetrics, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__((host, port), _Handler)
        self.live = live
        self.host = host
        self.node_names = [n.name for n in live.engine.layout.nodes]
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def node_url(self, node: str) -> str:
        return f"{self.url}/nodes/{node}/metrics"

    def target_urls(self) -> list[str]:
        return [
            *(self.node_url(n) for n in self.node_names),
            f"{self.url}/kube-state-metrics/metrics",
            f"{self.url}/jobs/metrics",
        ]

    def file_sd(self) -> list[dict[str, Any]]:
        """Prometheus file_sd groups (one per endpoint; `__metrics_path__` picks the page)."""
        address = f"{self.host}:{self.port}"
        groups: list[dict[str, Any]] = [
            {
                "targets": [address],
                "labels": {
                    "__metrics_path__": f"/nodes/{n}/metrics",
                    "job": "dcgm-exporter",
                    "node": n,
                },
            }
            for n in self.node_names
        ]
        for path, job in (
            ("/kube-state-metrics/metrics", "kube-state-metrics"),
            ("/jobs/metrics", "training-jobs"),
        ):
            groups.append({"targets": [address], "labels": {"__metrics_path__": path, "job": job}})
        return groups

    def start(self) -> MetricsServer:
        self._thread = threading.Thread(
            target=self.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="metrics-sim",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:  # shutdown() would wait forever for a loop never started
            self.shutdown()
            self._thread.join(timeout=5)
        self.server_close()
