"""Node and Pod records from either Kubernetes source: kube-state-metrics series or API objects.

The snapshot builder takes `Node` and `Pod` records; this module makes them, the same way for the
Prometheus path (kube-state-metrics: `kube_pod_info`, `kube_pod_labels`,
`kube_pod_status_phase`, `kube_node_info`, `kube_node_labels`, `kube_node_spec_unschedulable`,
`kube_node_status_condition`, `kube_node_spec_taint`, and `kube_node_status_capacity` /
`kube_node_status_allocatable` for `resource="nvidia_com_gpu"`) and for the Kubernetes API
path (pod and node objects as JSON dicts: a watch event's `object`, or
`ApiClient().sanitize_for_serialization(obj)` in the one adapter that imports the client).
Plain dicts in, frozen records out; no client here.

kube-state-metrics exports labels sanitised (`label_nvidia_com_gpu_product`), which cannot be
turned back into `nvidia.com/gpu.product`; records keep them as exported. Read labels with
`observer.snapshot.job_identity.label_value(labels, "nvidia.com/gpu.product")`, which accepts both
forms,
so code works on snapshots from either path.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from observer.fleet.model import Node, NodeName, Pod, Taint, frozen_map

LabelRows = Iterable[Mapping[str, str]]
"""Label sets of one metric family, one per series."""
Vector = Sequence[Mapping[str, Any]]
"""A PromQL instant vector: `{"metric": labels, "value": [t, v]}` per series."""
ValueRows = Iterable[tuple[Mapping[str, str], float]]
"""(label set, sample value) per series."""

KSM_FAMILIES = (
    "kube_pod_info",
    "kube_pod_labels",
    "kube_node_info",
    "kube_node_labels",
    "kube_node_spec_unschedulable",
    "kube_node_spec_taint",
)
"""kube-state-metrics families the collectors read."""
KSM_STATUS_FAMILIES = ("kube_pod_status_phase", "kube_node_status_condition")
"""Status families; only their series equal to 1 count."""
KSM_GPU_FAMILIES = ("kube_node_status_capacity", "kube_node_status_allocatable")
"""Node resource families; only `resource="nvidia_com_gpu"` is read (GPU capacity and
allocatable count)."""
KSM_GPU_RESOURCE = "nvidia_com_gpu"
"""kube-state-metrics' `resource` label for `nvidia.com/gpu` (sanitised; unit `integer`)."""
GPU_RESOURCE = "nvidia.com/gpu"

_SKIP_POD = frozenset({"namespace", "pod", "uid"})
_STATUS = {"true": "True", "false": "False", "unknown": "Unknown"}


def _ksm_labels(row: Mapping[str, str], skip: frozenset[str]) -> dict[str, str]:
    return {k: v for k, v in row.items() if k not in skip and k != "__name__" and v != ""}


def pods_from_kube_state_metrics(
    pod_info: LabelRows, pod_labels: LabelRows = (), pod_phase: ValueRows = ()
) -> list[Pod]:
    """Pods of `kube_pod_info`, with `kube_pod_labels` and the phase whose series is 1.

    Without `kube_pod_status_phase`, a pod with a node counts as Running, else Pending.
    """
    labels: dict[tuple[str, str], dict[str, str]] = {}
    for row in pod_labels:
        labels[(row.get("namespace", ""), row.get("pod", ""))] = _ksm_labels(row, _SKIP_POD)
    phase: dict[tuple[str, str], str] = {}
    for row, value in pod_phase:
        if value == 1:
            phase[(row.get("namespace", ""), row.get("pod", ""))] = row.get("phase", "Unknown")
    pods: list[Pod] = []
    for row in pod_info:
        key = (row.get("namespace", ""), row.get("pod", ""))
        node = row.get("node") or None
        pods.append(
            Pod(
                namespace=key[0],
                name=key[1],
                node=NodeName(node) if node else None,
                phase=phase.get(key, "Running" if node else "Pending"),
                labels=frozen_map(labels.get(key)),
                owner_kind=row.get("created_by_kind") or None,
                owner_name=row.get("created_by_name") or None,
                priority_class=row.get("priority_class") or None,
            )
        )
    return pods


def nodes_from_kube_state_metrics(
    node_info: LabelRows,
    node_labels: LabelRows = (),
    unschedulable: ValueRows = (),
    conditions: ValueRows = (),
    taints: LabelRows = (),
    gpu_counts: Iterable[tuple[str, Mapping[str, str], float]] = (),
) -> list[Node]:
    """Nodes of `kube_node_info` (or of any other family given, so none is lost).

    `gpu_counts`: (family, labels, value) of `kube_node_status_capacity` /
    `kube_node_status_allocatable`; rows of other resources are ignored."""
    names: dict[str, None] = {}  # ordered set; kube_node_info's own labels (kernel, runtime
    for row in node_info:  # versions) are not part of the model
        names[row.get("node", "")] = None
    lab: dict[str, dict[str, str]] = {}
    for row in node_labels:
        names[row.get("node", "")] = None
        lab[row.get("node", "")] = _ksm_labels(row, frozenset({"node"}))
    cordoned: set[str] = set()
    for row, value in unschedulable:
        names[row.get("node", "")] = None
        if value == 1:
            cordoned.add(row.get("node", ""))
    cond: dict[str, dict[str, str]] = {}
    for row, value in conditions:
        if value == 1:
            status = _STATUS.get(row.get("status", "").lower(), "Unknown")
            cond.setdefault(row.get("node", ""), {})[row.get("condition", "")] = status
    tnt: dict[str, list[Taint]] = {}
    for row in taints:
        taint = Taint(row.get("key", ""), row.get("value", ""), row.get("effect", ""))
        tnt.setdefault(row.get("node", ""), []).append(taint)
    counts: dict[tuple[str, str], int] = {}
    for fam, row, value in gpu_counts:
        if row.get("resource") == KSM_GPU_RESOURCE and math.isfinite(value):
            counts[(fam, row.get("node", ""))] = int(value)
    return [
        Node(
            name=NodeName(n),
            labels=frozen_map(lab.get(n)),
            taints=tuple(tnt.get(n, ())),
            schedulable=n not in cordoned,
            conditions=frozen_map(cond.get(n)),
            gpu_capacity=counts.get((KSM_GPU_FAMILIES[0], n)),
            gpu_allocatable=counts.get((KSM_GPU_FAMILIES[1], n)),
        )
        for n in names
        if n
    ]


def _get(obj: Mapping[str, Any] | None, camel: str, snake: str | None = None) -> Any:
    if not obj:
        return None
    value = obj.get(camel)
    return obj.get(snake) if value is None and snake else value


def _str_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (value or {}).items()}


def pod_from_api(obj: Mapping[str, Any]) -> Pod:
    """A v1 Pod (JSON dict, camelCase or the client's snake_case `to_dict()`)."""
    meta = _get(obj, "metadata") or {}
    spec = _get(obj, "spec") or {}
    status = _get(obj, "status") or {}
    owners: Sequence[Mapping[str, Any]] = _get(meta, "ownerReferences", "owner_references") or []
    owner = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
    node = _get(spec, "nodeName", "node_name")
    return Pod(
        namespace=str(_get(meta, "namespace") or "default"),
        name=str(_get(meta, "name") or ""),
        node=NodeName(node) if node else None,
        phase=str(_get(status, "phase") or "Unknown"),
        labels=frozen_map(_str_map(_get(meta, "labels"))),
        owner_kind=_get(owner, "kind"),
        owner_name=_get(owner, "name"),
        priority_class=_get(spec, "priorityClassName", "priority_class_name"),
        gpus=_gpu_request(spec),
    )


def _gpu_request(spec: Mapping[str, Any]) -> int:
    """`nvidia.com/gpu` over the pod's containers (limits, else requests; GPUs are not
    overcommitted, so the two are equal when both are set)."""
    total = 0
    for c in _get(spec, "containers") or []:
        res = _get(c, "resources") or {}
        amount = (_get(res, "limits") or {}).get("nvidia.com/gpu") or (
            _get(res, "requests") or {}
        ).get("nvidia.com/gpu")
        try:
            total += int(amount or 0)
        except (TypeError, ValueError):
            continue
    return total


def _gpu_count(resources: Mapping[str, Any] | None) -> int | None:
    """`nvidia.com/gpu` of a capacity/allocatable map (a quantity string: "8"); None if absent."""
    v = str((resources or {}).get(GPU_RESOURCE, ""))
    return int(v) if v.isdigit() else None


def node_from_api(obj: Mapping[str, Any]) -> Node:
    """A v1 Node (JSON dict, camelCase or snake_case)."""
    meta = _get(obj, "metadata") or {}
    spec = _get(obj, "spec") or {}
    status = _get(obj, "status") or {}
    taints = tuple(
        Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))
        for t in (_get(spec, "taints") or [])
    )
    conditions = {
        str(c.get("type")): str(c.get("status")) for c in (_get(status, "conditions") or [])
    }
    return Node(
        name=NodeName(str(_get(meta, "name") or "")),
        labels=frozen_map(_str_map(_get(meta, "labels"))),
        annotations=frozen_map(_str_map(_get(meta, "annotations"))),
        taints=taints,
        schedulable=not bool(_get(spec, "unschedulable")),
        conditions=frozen_map(conditions),
        gpu_capacity=_gpu_count(_get(status, "capacity")),
        gpu_allocatable=_gpu_count(_get(status, "allocatable")),
    )


def records_from_series(
    kube: Vector, status: Vector, strip: Sequence[str]
) -> tuple[list[Node], list[Pod]]:
    """Nodes and pods from kube-state-metrics series as PromQL or a scrape answers them
    (`{"metric": labels, "value": [t, v]}`; `strip`: Prometheus' target labels, removed)."""
    drop = set(strip) | {"__name__"}
    fams: dict[str, list[dict[str, str]]] = {}
    for r in [*kube, *status]:
        m = r["metric"]
        fams.setdefault(m.get("__name__", ""), []).append(
            {k: v for k, v in m.items() if k not in drop}
        )
    ones = [(row, 1.0) for row in fams.get("kube_pod_status_phase", [])]
    pods = pods_from_kube_state_metrics(
        fams.get("kube_pod_info", []), fams.get("kube_pod_labels", []), ones
    )
    unsched_rows = [
        (row, float(r["value"][1]))
        for r, row in zip(
            [r for r in kube if r["metric"].get("__name__") == "kube_node_spec_unschedulable"],
            fams.get("kube_node_spec_unschedulable", []),
            strict=True,
        )
    ]
    nodes = nodes_from_kube_state_metrics(
        fams.get("kube_node_info", []),
        fams.get("kube_node_labels", []),
        unsched_rows,
        [(row, 1.0) for row in fams.get("kube_node_status_condition", [])],
        fams.get("kube_node_spec_taint", []),
        [
            (str(r["metric"].get("__name__")), r["metric"], float(r["value"][1]))
            for r in kube
            if r["metric"].get("__name__") in KSM_GPU_FAMILIES
        ],
    )
    return nodes, pods
