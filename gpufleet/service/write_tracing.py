"""Every Kubernetes write the service makes, traced and counted.

The remediation cycle reads the cluster from the snapshot its live cycle collected
(`ClusterView.from_snapshot`), so nothing here reads or caches: the executor calls
`traced_writes(telemetry)` around each write, which runs it in a `k8s:<op>` span and counts it
by op and result.
"""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.service.telemetry import Telemetry
from remediations.capabilities import WriteContext
from remediations.executor import WriteHook
from remediations.types import Intent


def traced_writes(telemetry: Telemetry) -> WriteHook:
    """The executor's `around_write`: each write in its span, counted `ok` or by error type."""

    def around(intent: Intent, ctx: WriteContext, write: Callable[[], str]) -> str:
        attrs = {"op": intent.op, "target": intent.target, "action": ctx.action_id}
        with telemetry.span(f"k8s:{intent.op}", attrs) as span:
            try:
                did = write()
            except Exception as exc:
                telemetry.k8s_writes.add(1, {"op": intent.op, "result": type(exc).__name__})
                span.record_exception(exc)
                raise
            telemetry.k8s_writes.add(1, {"op": intent.op, "result": "ok"})
            return did

    return around
