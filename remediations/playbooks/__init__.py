"""Playbooks by name: each plans intents for one incident; the actuator carries them out."""

from __future__ import annotations

from collections.abc import Mapping

from remediations.playbooks.base import (
    BaseParams,
    NoPlan,
    Plan,
    Playbook,
    Subject,
    Verification,
    VerifyStatus,
)
from remediations.playbooks.drain import Drain, Migrate
from remediations.playbooks.fence import FenceGpu, UnfenceGpu
from remediations.playbooks.gpu_drain import EvictGpuPods
from remediations.playbooks.node_state import Cordon, Quarantine, Uncordon
from remediations.playbooks.reboot import RebootNode
from remediations.playbooks.replacement import MarkReplacement
from remediations.playbooks.requests import RequestReboot, RequestReset
from remediations.playbooks.reset import ResetGpu
from remediations.playbooks.restart import RestartJob, RestartPod

PLAYBOOKS: Mapping[str, Playbook] = {
    p.name: p
    for p in (
        Cordon(),
        Uncordon(),
        Quarantine(),
        Drain(),
        Migrate(),
        EvictGpuPods(),
        RestartPod(),
        RestartJob(),
        RequestReset(),
        RequestReboot(),
        FenceGpu(),
        UnfenceGpu(),
        ResetGpu(),
        RebootNode(),
        MarkReplacement(),
    )
}

__all__ = [
    "PLAYBOOKS",
    "BaseParams",
    "NoPlan",
    "Plan",
    "Playbook",
    "Subject",
    "Verification",
    "VerifyStatus",
]
