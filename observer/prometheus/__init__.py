"""The Prometheus collector: query plan, one HTTP client, instant cycles, range replay.

A cycle, file by file: collector -> plan -> client -> memory -> assemble -> parse (the
collector's docstring walks through it); range replays live in `replay/`.
"""

from observer.prometheus.client import (
    PrometheusClient,
    PrometheusUnreachable,
    QueryFailed,
    QueryRejected,
    QueryTemporary,
)
from observer.prometheus.collector import CollectResult, PrometheusCollector
from observer.prometheus.plan import PromSettings

__all__ = [
    "CollectResult",
    "PromSettings",
    "PrometheusClient",
    "PrometheusCollector",
    "PrometheusUnreachable",
    "QueryFailed",
    "QueryRejected",
    "QueryTemporary",
]
