"""The names, labels and markers gpufleet writes on cluster objects, shared by the playbooks that
plan them and the Kubernetes wing (`kube/`) that writes and reads them back.

Node names are DNS-1123 subdomains of up to 253 characters (EKS `ip-10-0-1-2.us-east-2.compute.
internal`, on-prem FQDNs), while a Job name is a label value too (the Job's pods are labelled with
it: 63 characters at most) and a label value holds 63. Cutting such a name anywhere can leave
`.-` or a trailing `.`, which the API server refuses (422), so names are built from a node name's
characters mapped into a DNS-1123 label, and whatever does not fit is replaced by a hash.
"""

from __future__ import annotations

import re

from observer.snapshot.job_identity import DEFAULT_JOB_LABEL_KEYS
from remediations.types import stable_id

# ---- labels -------------------------------------------------------------------------------------

GPU_COUNT_LABEL = "nvidia.com/gpu.count"
"""GPU feature discovery's count of a node's GPUs (the view's fallback when no GPU is seen)."""
REPAIR_LABEL = "gpufleet.io/repair"
"""On every repair Job gpufleet creates: what it does (`reset-gpu`, `reboot-sentinel`)."""
UUID_LABEL = "gpufleet.io/gpu-uuid"
"""On a repair Job for one GPU: its UUID (the writer checks the GPU's ResourceClaims by it)."""
INDEX_LABEL = "gpufleet.io/gpu-index"
GPU_LABEL = "gpufleet.io/gpu"
"""On gpufleet's DeviceTaintRules: the fenced GPU's UUID, lower case, cut to a label value."""
JOB_LABEL_KEYS: tuple[str, ...] = DEFAULT_JOB_LABEL_KEYS
"""The operators' job-name pod labels, in priority order (the observer's job identity owns the
list; the actuator groups live pods into jobs by the same keys)."""

# ---- markers and operations ---------------------------------------------------------------------

GUARD_OP = "cordon_unless_withdrawn"
"""Cordon the node unless the device plugin already withdrew exactly one GPU (decided at pin):
the pods-on-GPU grain's guard, also fence_gpu's fallback where no DeviceTaintRules are served."""
KEEP_REBOOTS = 10
"""Reboot times kept in `gpufleet.io/reboots` (newest last)."""


def marker_boot_id(value: str) -> str:
    """The boot id a reboot marker was written against (`<action id>:<boot id>`)."""
    return value.rsplit(":", 1)[-1]


def fence_rule_name(gpu_uuid: str) -> str:
    """gpufleet's DeviceTaintRule name for one GPU: a DNS subdomain derived from its UUID."""
    return "gpufleet-" + gpu_uuid.lower().replace("_", "-")[:50]


# ---- Job names and label values -----------------------------------------------------------------

LABEL_VALUE_MAX = 63
JOB_NAME_MAX = 63
"""A Job's name also labels its pods (`batch.kubernetes.io/job-name`), so it is a label value."""

_NOT_LABEL = re.compile(r"[^a-z0-9-]+")


def label_part(text: str, limit: int) -> str:
    """`text` as a piece of a DNS-1123 label: lower case, any other character run a `-`, at most
    `limit` characters, never ending in `-` (a hash or suffix follows it)."""
    return _NOT_LABEL.sub("-", text.lower())[:limit].rstrip("-")


def job_name(prefix: str, subject: str, *key: object, suffix: str = "", limit: int = 33) -> str:
    """`<prefix>-<subject, cut>[suffix]-<hash of key>`: a DNS-1123 label of at most 63
    characters (`prefix` and `suffix` are label characters already)."""
    room = JOB_NAME_MAX - len(prefix) - len(suffix) - 10
    head = label_part(subject, min(limit, room))
    return (
        f"{prefix}-{head}{suffix}-{stable_id(*key)[:8]}"
        if head
        else (f"{prefix}{suffix}-{stable_id(*key)[:8]}")
    )


def label_value(value: str) -> str:
    """`value` when it is short enough for a label, else its first characters and a hash."""
    if len(value) <= LABEL_VALUE_MAX:
        return value
    keep = value[: LABEL_VALUE_MAX - 9].rstrip("-_.")
    return f"{keep}-{stable_id(value)[:8]}"
