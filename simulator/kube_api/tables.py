"""Server-side printing: `meta.k8s.io/v1` Tables, which is what `kubectl get` asks for.

kubectl stopped printing columns itself; it sends `Accept: application/json;as=Table;...` and
prints the server's cells. Without this the simulator's `kubectl get nodes` would show only
NAME and AGE. Columns follow the real API server's printers for nodes and pods.
"""

from __future__ import annotations

import time
from typing import Any

from simulator.kube_api.objects import parse_rfc3339

Obj = dict[str, Any]
Column = tuple[str, str, int]
"""(name, type, priority); priority 1 columns appear with `-o wide` only."""

_COLUMNS: dict[str, list[Column]] = {
    "nodes": [
        ("Name", "string", 0),
        ("Status", "string", 0),
        ("Roles", "string", 0),
        ("Age", "string", 0),
        ("Version", "string", 0),
        ("Internal-IP", "string", 1),
        ("External-IP", "string", 1),
        ("OS-Image", "string", 1),
        ("Kernel-Version", "string", 1),
        ("Container-Runtime", "string", 1),
    ],
    "pods": [
        ("Name", "string", 0),
        ("Ready", "string", 0),
        ("Status", "string", 0),
        ("Restarts", "string", 0),
        ("Age", "string", 0),
        ("IP", "string", 1),
        ("Node", "string", 1),
        ("Nominated Node", "string", 1),
        ("Readiness Gates", "string", 1),
    ],
    "events": [
        ("Last Seen", "string", 0),
        ("Type", "string", 0),
        ("Reason", "string", 0),
        ("Object", "string", 0),
        ("Message", "string", 0),
    ],
    "poddisruptionbudgets": [
        ("Name", "string", 0),
        ("Min Available", "string", 0),
        ("Max Unavailable", "string", 0),
        ("Allowed Disruptions", "integer", 0),
        ("Age", "string", 0),
    ],
    "leases": [("Name", "string", 0), ("Holder", "string", 0), ("Age", "string", 0)],
    "resourceclaims": [("Name", "string", 0), ("State", "string", 0), ("Age", "string", 0)],
    "resourceslices": [
        ("Name", "string", 0),
        ("Node", "string", 0),
        ("Driver", "string", 0),
        ("Pool", "string", 0),
        ("Age", "string", 0),
    ],
}
_DEFAULT: list[Column] = [("Name", "string", 0), ("Age", "string", 0)]


def human_age(ts: str | None, now: float | None = None) -> str:
    t = parse_rfc3339(ts)
    if t is None:
        return "<unknown>"
    s = max(0, int((time.time() if now is None else now) - t))
    if s < 120:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 10 * 3600:
        h, m = divmod(s // 60, 60)
        return f"{h}h{m}m" if m else f"{h}h"
    if s < 2 * 86400:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def _node_cells(o: Obj) -> list[Any]:
    st, meta = o.get("status", {}), o["metadata"]
    ready = next((c["status"] for c in st.get("conditions", []) if c["type"] == "Ready"), "Unknown")
    status = "Ready" if ready == "True" else "NotReady" if ready == "False" else "Unknown"
    if o.get("spec", {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    roles = sorted(
        k.split("/", 1)[1]
        for k in (meta.get("labels") or {})
        if k.startswith("node-role.kubernetes.io/")
    )
    addr = {a["type"]: a["address"] for a in st.get("addresses", [])}
    info = st.get("nodeInfo", {})
    return [
        meta["name"],
        status,
        ",".join(roles) or "<none>",
        human_age(meta.get("creationTimestamp")),
        info.get("kubeletVersion", ""),
        addr.get("InternalIP", "<none>"),
        addr.get("ExternalIP", "<none>"),
        info.get("osImage", ""),
        info.get("kernelVersion", ""),
        info.get("containerRuntimeVersion", ""),
    ]


def _pod_cells(o: Obj) -> list[Any]:
    st, meta = o.get("status", {}), o["metadata"]
    cs = st.get("containerStatuses") or []
    total = len(o.get("spec", {}).get("containers", []))
    ready = sum(1 for c in cs if c.get("ready"))
    restarts = sum(int(c.get("restartCount", 0)) for c in cs)
    reason = st.get("reason") or st.get("phase", "Unknown")
    if meta.get("deletionTimestamp"):
        reason = "Terminating"
    elif st.get("phase") == "Succeeded":
        reason = "Completed"
    return [
        meta["name"],
        f"{ready}/{total}",
        reason,
        str(restarts),
        human_age(meta.get("creationTimestamp")),
        st.get("podIP") or "<none>",
        o.get("spec", {}).get("nodeName") or "<none>",
        "<none>",
        "<none>",
    ]


def _cells(resource: str, o: Obj) -> list[Any]:
    meta = o["metadata"]
    if resource == "nodes":
        return _node_cells(o)
    if resource == "pods":
        return _pod_cells(o)
    if resource == "events":
        inv = o.get("involvedObject", {})
        return [
            human_age(o.get("lastTimestamp") or meta.get("creationTimestamp")),
            o.get("type", ""),
            o.get("reason", ""),
            f"{inv.get('kind', '').lower()}/{inv.get('name', '')}",
            o.get("message", ""),
        ]
    if resource == "poddisruptionbudgets":
        spec = o.get("spec", {})
        return [
            meta["name"],
            str(spec.get("minAvailable", "N/A")),
            str(spec.get("maxUnavailable", "N/A")),
            int(o.get("status", {}).get("disruptionsAllowed", 0)),
            human_age(meta.get("creationTimestamp")),
        ]
    if resource == "leases":
        return [
            meta["name"],
            o.get("spec", {}).get("holderIdentity") or "",
            human_age(meta.get("creationTimestamp")),
        ]
    if resource == "resourceslices":
        spec = o.get("spec", {})
        return [
            meta["name"],
            spec.get("nodeName") or "",
            spec.get("driver", ""),
            (spec.get("pool") or {}).get("name", ""),
            human_age(meta.get("creationTimestamp")),
        ]
    if resource == "resourceclaims":
        status = o.get("status") or {}
        state = [s for s, on in (("allocated", status.get("allocation")),
                                 ("reserved", status.get("reservedFor"))) if on]  # fmt: skip
        if meta.get("deletionTimestamp"):
            state.append("deleted")
        return [
            meta["name"],
            ",".join(state) or "pending",
            human_age(meta.get("creationTimestamp")),
        ]
    return [meta["name"], human_age(meta.get("creationTimestamp"))]


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


def table(resource: str, items: list[Obj], list_meta: Obj, include_object: str = "Metadata") -> Obj:
    cols = _COLUMNS.get(resource, _DEFAULT)
    rows = []
    for o in items:
        row: Obj = {"cells": _cells(resource, o)}
        if include_object == "Object":
            row["object"] = o
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": o["metadata"],
            }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": [
            {
                "name": n,
                "type": t,
                "format": "name" if n == "Name" else "",
                "description": n,
                "priority": p,
            }
            for n, t, p in cols
        ],
        "rows": rows,
    }
