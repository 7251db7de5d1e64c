"""Node taint writes that never lose another controller's taint.

`spec.taints` is an atomic list: a patch replaces it whole. On a real cluster other writers change
it at the same moments gpufleet does (the node lifecycle controller's `unreachable:NoExecute`
and `unschedulable`, the cluster autoscaler, node-problem-detector), so a list rebuilt from an
earlier read and written blindly can drop a taint just added, or bring back a stale
`unreachable:NoExecute` that starts evictions. Each write therefore carries the resourceVersion
it was computed from (the server answers 409 if the node changed), and on 409 the node is read
again and the change recomputed from what is there now.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from errors import PermanentError, TemporaryError

Taint = dict[str, Any]
TAINT_WRITE_ATTEMPTS = 5


def patch_taints(
    core: client.CoreV1Api,
    name: str,
    change: Callable[[list[Taint]], list[Taint] | None],
    annotations: Mapping[str, str],
) -> bool:
    """Apply `change` (the current taints -> the new list, or None: nothing to do) to node
    `name` under a resourceVersion precondition; re-read and retry on a conflict. True when
    written."""
    for _ in range(TAINT_WRITE_ATTEMPTS):
        try:
            node = core.read_node(name)
        except ApiException as exc:
            if exc.status == 404:
                raise PermanentError(f"node {name} does not exist") from exc
            raise
        current: list[Taint] = core.api_client.sanitize_for_serialization(
            (node.spec.taints if node.spec else None) or []
        )
        new = change([dict(t) for t in current])
        if new is None:
            return False
        rv = node.metadata.resource_version if node.metadata else None
        body = {
            "metadata": {"resourceVersion": rv, "annotations": dict(annotations)},
            "spec": {"taints": new or None},
        }
        try:
            core.patch_node(name, body)
            return True
        except ApiException as exc:
            if exc.status != 409:
                raise
    raise TemporaryError(
        f"taints of node {name}: the node changed under {TAINT_WRITE_ATTEMPTS} writes in a row"
    )


def same(t: Taint, key: str, effect: str | None = None) -> bool:
    return bool(t.get("key") == key and (effect is None or t.get("effect") == effect))
