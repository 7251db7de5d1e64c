"""dcgm-exporter as Kubernetes pods with reachable addresses, so discovery by pod labels runs here.

A real cluster runs dcgm-exporter as a DaemonSet: one pod per GPU node, scraped at
`podIP:9400` by Prometheus' `kubernetes_sd` (role pod) or by gpufleet's own discovery. In the
simulator every node's exporter is the same process, and pod IPs like 10.0.0.2 lead nowhere, so
each node's exporter gets its own listener on a free loopback port: the pod's `podIP` is the
listener's host (127.0.0.1) and its container port, named as the install names it, is that port.
The address is therefore distinct per pod by port rather than by IP; everything else (labels,
namespace, DaemonSet owner, the named port) is the install's own layout.

Layouts: `gpu-operator` (the GPU Operator: `app=nvidia-dcgm-exporter` in `gpu-operator`, port
`gpu-metrics`) and `chart` (dcgm-exporter's Helm chart: `app.kubernetes.io/name=dcgm-exporter`,
port `metrics`).
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass
from http.server import ThreadingHTTPServer

from simulator.cluster import SimCluster
from simulator.kube_api.objects import GPU_NAMESPACE
from simulator.metrics_server import MetricsServer, _Handler

DAEMONSET = "nvidia-dcgm-exporter"


@dataclass(frozen=True, slots=True)
class ExporterLayout:
    labels: dict[str, str]
    port_name: str


LAYOUTS = {
    "gpu-operator": ExporterLayout({"app": "nvidia-dcgm-exporter"}, "gpu-metrics"),
    "chart": ExporterLayout(
        {"app.kubernetes.io/name": "dcgm-exporter", "app.kubernetes.io/instance": "dcgm-exporter"},
        "metrics",
    ),
}


class _PodHandler(_Handler):
    """`GET /metrics` on a node's own listener: that node's exporter page."""

    server: _NodeListener  # type: ignore[assignment]

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0].rstrip("/") == "/metrics":
            self.path = f"/nodes/{self.server.node}/metrics"
        else:
            self.path = "/not-found"
        super().do_GET()


class _NodeListener(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, metrics: MetricsServer, node: str, host: str) -> None:
        super().__init__((host, 0), _PodHandler)
        self.node = node
        self.live = metrics.live
        self.node_names = metrics.node_names


class ExporterPods:
    """One listener per node and the exporter pods that point at them."""

    def __init__(self, metrics: MetricsServer, layout: str, host: str = "127.0.0.1") -> None:
        if layout not in LAYOUTS:
            raise ValueError(f"exporter pod layout: one of {', '.join(LAYOUTS)}, got {layout!r}")
        self.layout = LAYOUTS[layout]
        self.host = host
        self.listeners = {n: _NodeListener(metrics, n, host) for n in metrics.node_names}
        self._threads = [
            threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.2},
                             name=f"exporter-{n}", daemon=True)
            for n, s in self.listeners.items()
        ]  # fmt: skip
        for t in self._threads:
            t.start()

    def port_of(self, node: str) -> int:
        return int(self.listeners[node].server_address[1])

    def publish(self, cluster: SimCluster) -> None:
        """Give each node's dcgm-exporter pod the layout's labels, its named container port and
        a reachable podIP (a MODIFIED event to watchers, as a rollout would)."""
        for node in self.listeners:
            old = cluster.store.get("pods", GPU_NAMESPACE, f"{DAEMONSET}-{node}")
            if old is None:
                continue
            pod = copy.deepcopy(old)
            labels = {k: v for k, v in pod["metadata"].get("labels", {}).items() if k != "app"}
            pod["metadata"]["labels"] = {**labels, **self.layout.labels}
            port = {"name": self.layout.port_name, "containerPort": self.port_of(node),
                    "protocol": "TCP"}  # fmt: skip
            pod["spec"]["containers"][0]["ports"] = [port]
            pod["status"]["podIP"] = self.host
            pod["status"]["podIPs"] = [{"ip": self.host}]
            cluster.store.put("pods", pod)

    def stop(self) -> None:
        for s in self.listeners.values():
            s.shutdown()
            s.server_close()
