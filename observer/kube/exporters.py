"""dcgm-exporter endpoints found the way Prometheus' `kubernetes_sd` (role pod) finds them.

Pods from the collector's watch cache (no extra API call, no `/targets` service) are kept when
they are in the selector's namespace, carry its labels, run, and have an IP; the endpoint is the
pod IP and the container port named as the install names it (or the install's default port
number when no port carries such a name). The defaults cover the two common installs:

- the GPU Operator: `app=nvidia-dcgm-exporter` in `gpu-operator`, port `gpu-metrics`, 9400;
- dcgm-exporter's own Helm chart: `app.kubernetes.io/name=dcgm-exporter` in any namespace,
  port `metrics`, 9400.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ExporterSelector:
    namespace: str
    """Only pods in this namespace; empty: every namespace."""
    labels: tuple[tuple[str, str], ...]
    """Every (key, value) must be among the pod's labels (an equality selector)."""
    port_names: tuple[str, ...]
    """Container port names tried in order."""
    port: int = 9400
    """When no container port has one of `port_names`: this port number on the pod IP."""
    scheme: str = "http"
    path: str = "/metrics"


DEFAULT_EXPORTER_SELECTORS = (
    ExporterSelector(
        "gpu-operator", (("app", "nvidia-dcgm-exporter"),), ("gpu-metrics", "metrics")
    ),
    ExporterSelector("", (("app.kubernetes.io/name", "dcgm-exporter"),), ("metrics",)),
)


def parse_label_selector(text: str) -> tuple[tuple[str, str], ...]:
    """`k=v,k2=v2` (or `==`) -> pairs; ValueError naming the term that is not one."""
    out = []
    for term in (t.strip() for t in text.split(",")):
        key, sep, value = term.replace("==", "=").partition("=")
        if not sep or not key.strip() or "!" in key:
            raise ValueError(f"equality terms `key=value` separated by commas (got {term!r})")
        out.append((key.strip(), value.strip()))
    return tuple(out)


def _port(containers: Iterable[Mapping[str, Any]], sel: ExporterSelector) -> int:
    ports = [p for c in containers for p in (c.get("ports") or [])]
    for name in sel.port_names:
        for p in ports:
            if p.get("name") == name and p.get("containerPort"):
                return int(p["containerPort"])
    return sel.port


def exporter_urls(
    pods: Iterable[Mapping[str, Any]], selectors: Iterable[ExporterSelector]
) -> list[str]:
    """Scrape URLs of the running pods that match a selector (each URL once, sorted)."""
    return sorted(exporter_targets(pods, selectors))


def exporter_targets(
    pods: Iterable[Mapping[str, Any]], selectors: Iterable[ExporterSelector]
) -> dict[str, str]:
    """Scrape URL -> the exporter pod's `spec.nodeName` ("" when unbound), for the running
    pods that match a selector: the node its GPUs are on, whatever their `Hostname` says."""
    sels = tuple(selectors)
    urls: dict[str, str] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        ip = status.get("podIP")
        if not ip or status.get("phase") != "Running" or meta.get("deletionTimestamp"):
            continue
        labels = meta.get("labels") or {}
        for sel in sels:
            if sel.namespace and meta.get("namespace") != sel.namespace:
                continue
            if any(labels.get(k) != v for k, v in sel.labels):
                continue
            port = _port((pod.get("spec") or {}).get("containers") or [], sel)
            host = f"[{ip}]" if ":" in ip else ip
            node = str((pod.get("spec") or {}).get("nodeName") or "")
            urls[f"{sel.scheme}://{host}:{port}{sel.path}"] = node
            break
    return dict(sorted(urls.items()))
