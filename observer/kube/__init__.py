"""The Kubernetes collector: nodes, pods and events by list + watch."""

from observer.kube.collector import KubeCollector, KubeSettings, KubeStats, load_api_client

__all__ = ["KubeCollector", "KubeSettings", "KubeStats", "load_api_client"]
