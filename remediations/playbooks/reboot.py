"""reboot_node: have the node's reboot daemon reboot it, a few nodes at a time, and confirm it.

gpufleet has no host access; it asks through a contract a node agent (kured with a sentinel
command, or the operator's own daemon) carries out, documented in docs/remediation.md:

- `mode: sentinel` (default): the node gets `gpufleet.io/reboot-required=<action id>:<boot id>`.
  The daemon reboots while that boot id is the node's running one (`status.nodeInfo.bootID`, the
  kernel's /proc/sys/kernel/random/boot_id); after the reboot it no longer is, so a marker left
  behind can never reboot the node twice (the reboot loop of NVSentinel #1543).
- `mode: job` (where the operator allows it): a privileged Job pinned to the node also writes
  kured's default sentinel file /var/run/reboot-required (a tmpfs: a reboot removes it).

The lock is the cluster itself: nodes carrying the marker hold the `max_concurrent` reboot slots,
so it survives gpufleet restarts and leader changes. The action then waits (a retried step, within
`execute_timeout`) until the bootID changed and the node is Ready, removes the marker and records
the reboot's time on the node (`gpufleet.io/reboots`); past `max_reboots` within `reboot_window`
the playbook plans nothing and a person decides. Attempt limits, cooldowns, the breaker and
maintenance windows apply as to every disruptive playbook. A node back from a reboot is not
validated here: the quarantine and diagnostics return it to service (NVSentinel #1427).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from observer.fleet.units import Duration
from remediations.capabilities import ClusterReader
from remediations.cluster_names import REPAIR_LABEL, job_name
from remediations.cluster_rules import reboot_times
from remediations.cluster_view import ClusterView
from remediations.playbooks.base import (
    BaseParams,
    NoPlan,
    Plan,
    Playbook,
    Subject,
    Verification,
    VerifyStatus,
    node_of,
    node_target,
)
from remediations.types import JOBS_NAMESPACE, REBOOT_ANNOTATION, Intent


class RebootParams(BaseParams):
    execute_timeout: Duration = Field(default=1800.0, gt=0)
    """How long the node may take to reboot and be Ready again before the action fails."""
    mode: Literal["sentinel", "job"] = "sentinel"
    max_concurrent: int = Field(default=1, ge=1)
    """Nodes that may be rebooting at once (those carrying the marker, counted in the cluster)."""
    max_reboots: int = Field(default=2, ge=1)
    reboot_window: Duration = Field(default=86400.0, gt=0)
    """Past `max_reboots` completed gpufleet reboots of a node within this window, a person
    decides (the loop guard, read from the node's own `gpufleet.io/reboots`)."""
    namespace: str = Field(default=JOBS_NAMESPACE, min_length=1)
    """`mode: job`: where the Job runs (see the reset playbook's `namespace`)."""
    image: str = Field(default="busybox:1.36", min_length=1)
    command: list[str] = Field(
        default_factory=lambda: ["touch", "/var/run/reboot-required"], min_length=1
    )
    """`mode: job`: what the privileged Job runs, with `host_path` mounted from the host."""
    host_path: str = "/var/run"


def rebooting(view: ClusterView, besides: str) -> list[str]:
    """Nodes holding a reboot slot (carrying the marker), other than `besides`."""
    return sorted(
        n.name
        for n in view.nodes.values()
        if REBOOT_ANNOTATION in n.annotations and n.name != besides
    )


def reboot_job_name(node: str, incident_id: str, taken_at: float) -> str:
    """A DNS-1123 label from the node and the planning moment, valid for any node name."""
    return job_name("gpufleet-reboot", node, incident_id, node, taken_at, limit=30)


class RebootNode(Playbook):
    name = "reboot_node"
    disruptive = True
    Params = RebootParams

    def plan(self, subject: Subject, view: ClusterView, params: BaseParams) -> Plan | NoPlan:
        assert isinstance(params, RebootParams)
        node = node_of(subject, view)
        if isinstance(node, NoPlan):
            return node
        busy = rebooting(view, node)
        if len(busy) >= params.max_concurrent:
            return NoPlan(
                f"waits for a reboot slot: {len(busy)} node(s) rebooting "
                f"(max_concurrent {params.max_concurrent}): {', '.join(busy[:5])}"
            )
        recent = [
            t for t in reboot_times(view.nodes[node]) if t > view.taken_at - params.reboot_window
        ]
        if len(recent) >= params.max_reboots:
            return NoPlan(
                f"{node} was rebooted by gpufleet {len(recent)} times within "
                f"{params.reboot_window:.0f}s (max_reboots {params.max_reboots}): a person decides"
            )
        mark: dict[str, object] = {"max_concurrent": params.max_concurrent, "mode": params.mode}
        if params.mode == "job":
            mark.update(
                namespace=params.namespace,
                name=reboot_job_name(node, subject.incident_id, view.taken_at),
                image=params.image,
                command=list(params.command),
                host_path=params.host_path,
                labels={REPAIR_LABEL: "reboot-sentinel"},
            )
        intents = (Intent("mark_reboot", node, mark), Intent("await_reboot", node, {}))
        return Plan(self.name, node_target(node), intents, True, (node,))

    def verify(
        self, intents: tuple[Intent, ...], reader: ClusterReader, params: BaseParams
    ) -> Verification:
        for i in intents:
            if i.op != "mark_reboot":
                continue
            node = reader.node(i.target)
            if node is None:
                return Verification(VerifyStatus.FAILED, f"node {i.target} is gone")
            before = str(i.args.get("boot_id") or "")
            if before and node.boot_id == before:
                return Verification(VerifyStatus.PENDING, f"{i.target} has not rebooted yet")
            if not node.ready:
                return Verification(VerifyStatus.PENDING, f"{i.target} is not Ready yet")
            if REBOOT_ANNOTATION in node.annotations:
                return Verification(VerifyStatus.PENDING, f"{i.target} still has the marker")
            return Verification(
                VerifyStatus.OK, f"{i.target} rebooted (bootID {before} -> {node.boot_id}), Ready"
            )
        return Verification(VerifyStatus.FAILED, "no reboot step in the plan")

    def rollback(self, intents: tuple[Intent, ...]) -> tuple[Intent, ...]:
        """Take the marker back (only gpufleet's own, for this action): no reboot later."""
        return tuple(Intent("clear_reboot", i.target, {}) for i in intents if i.op == "mark_reboot")
