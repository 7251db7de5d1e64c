"""Which Kubernetes node a GPU's exporter runs on, when its `Hostname` is not the node's name.

dcgm-exporter's `Hostname` is `NODE_NAME` where the Helm chart or the GPU Operator sets it;
otherwise it is the exporter pod's hostname: the pod name, or a fully qualified name
(`ip-10-0-0-1.ec2.internal` for a node `ip-10-0-0-1`, or differently cased). So a GPU joins its
node by, in order: the exporter pod's `spec.nodeName` as Prometheus' Kubernetes service
discovery relabels it (`kubernetes_node`, `node`; observer.snapshot.inputs reads those labels
first), the exact name, the name of a pod on that node (the exporter pod: the Kubernetes
collector's pods, or kube-state-metrics' `kube_pod_info`), then the same name lower-cased, then
its first DNS label lower-cased, when exactly one node has it. A GPU that joins no node is kept
under its `Hostname` as a node outside Kubernetes and reported (`unjoined_gpus`), never dropped.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from observer.fleet.model import FleetSnapshot, Pod


def _short(name: str) -> str:
    return name.split(".", 1)[0].lower()


def _unique(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """key -> node, only for keys that name exactly one node."""
    seen: dict[str, str] = {}
    twice: set[str] = set()
    for key, node in pairs:
        if key in seen and seen[key] != node:
            twice.add(key)
        seen.setdefault(key, node)
    return {k: v for k, v in seen.items() if k not in twice}


def join_hostnames(
    hostnames: Collection[str], node_names: Collection[str], pods: Iterable[Pod] = ()
) -> dict[str, str]:
    """Hostname -> Kubernetes node name, for each hostname that joins one (see module doc)."""
    nodes = set(node_names)
    if not nodes:
        return {}
    pod_node = _unique((p.name, str(p.node)) for p in pods if p.node and str(p.node) in nodes)
    lower = _unique((n.lower(), n) for n in nodes)
    short = _unique((_short(n), n) for n in nodes)
    out: dict[str, str] = {}
    for h in hostnames:
        found = (
            (h if h in nodes else None)
            or pod_node.get(h)
            or lower.get(h.lower())
            or short.get(_short(h))
        )
        if found is not None:
            out[h] = found
    return out


def unjoined_gpus(snapshot: FleetSnapshot) -> Mapping[str, int]:
    """Hostname -> GPUs whose exporter joined no Kubernetes node, when the snapshot has
    Kubernetes nodes at all (for `collect --summary` and `gpufleet doctor`)."""
    if not any(n.in_kubernetes for n in snapshot.nodes):
        return {}
    out: dict[str, int] = {}
    for i, node in enumerate(snapshot.nodes):
        if not node.in_kubernetes:
            count = int((snapshot.gpus.node_index == i).sum())
            if count:
                out[str(node.name)] = count
    return out
