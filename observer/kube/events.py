"""Which Kubernetes events concern GPUs or nodes, and how they become snapshot `Event`s.

Warning events only. An event is kept when it is about a Node, or comes from a component that
reports hardware (node-problem-detector, kubelet, the NVIDIA device plugin, DCGM, the GPU
operator), or its reason/message speaks of GPUs (XID, NVRM, NVLink, ECC, `nvidia.com/gpu`).
The node is the involved Node, else the reporting host, else the node of the involved pod; a GPU
UUID in the message is kept. Plain JSON dicts in (a watch event's raw object), records out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from observer.fleet.model import Event, GpuUuid, NodeName

HARDWARE_COMPONENTS = (
    "node-problem-detector",
    "kubelet",
    "nvidia-device-plugin",
    "device-plugin",
    "dcgm",
    "gpu-operator",
    "nvsentinel",
)
GPU_WORDS = re.compile(r"\bxid\b|nvrm|nvlink|\becc\b|\bgpu|nvidia|dcgm|fallen off the bus", re.I)
GPU_UUID = re.compile(
    r"GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)


def parse_time(value: Any) -> float | None:
    if not value or not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _component(obj: Mapping[str, Any]) -> str:
    source = obj.get("source") or {}
    return str(source.get("component") or obj.get("reportingComponent") or "")


def concerns_gpus_or_nodes(obj: Mapping[str, Any]) -> bool:
    if obj.get("type") != "Warning":
        return False
    involved = obj.get("involvedObject") or {}
    if involved.get("kind") == "Node":
        return True
    text = f"{obj.get('reason', '')} {obj.get('message', '')}"
    if GPU_WORDS.search(text):
        return True
    component = _component(obj).lower()
    return any(c in component for c in HARDWARE_COMPONENTS) and involved.get("kind") != "Pod"


def event_from_api(
    obj: Mapping[str, Any], node_of_pod: Callable[[str, str], str | None] = lambda ns, n: None
) -> Event | None:
    """The snapshot Event for a v1 Event dict, or None when it is not one we keep."""
    if not concerns_gpus_or_nodes(obj):
        return None
    involved = obj.get("involvedObject") or {}
    kind = str(involved.get("kind") or "")
    name = str(involved.get("name") or "")
    source = obj.get("source") or {}
    node: str | None = None
    if kind == "Node":
        node = name
    elif source.get("host"):
        node = str(source["host"])
    elif kind == "Pod":
        node = node_of_pod(str(involved.get("namespace") or ""), name)
    message = str(obj.get("message") or "")
    uuid = GPU_UUID.search(message)
    when = (
        parse_time(obj.get("lastTimestamp"))
        or parse_time(obj.get("eventTime"))
        or parse_time(obj.get("firstTimestamp"))
        or parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
        or 0.0
    )
    return Event(
        time=when,
        reason=str(obj.get("reason") or ""),
        message=message,
        node=NodeName(node) if node else None,
        gpu_uuid=GpuUuid(uuid.group(0)) if uuid else None,
        source=_component(obj),
        involved_kind=kind,
        involved_name=name,
        count=int(obj.get("count") or 1),
    )
