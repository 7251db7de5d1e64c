"""Small builders shared by the remediation tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from detectors.findings import Finding, FindingKind, Severity
from errors.config_files import load_yaml_file
from remediations.policy import DEFAULT_POLICY, Policy, policy_from_dict


def finding(
    kind: FindingKind = FindingKind.GPU_XID,
    severity: Severity = Severity.CRITICAL,
    node: str | None = "p-0000",
    gpu: str | None = "GPU-0",
    job: str | None = None,
    first_seen: float = 1000.0,
    last_seen: float | None = None,
    pre_existing: bool = False,
) -> Finding:
    return Finding(
        kind=kind,
        severity=severity,
        summary=f"{kind.value} on {node}",
        first_seen=first_seen,
        last_seen=first_seen if last_seen is None else last_seen,
        node=node,
        gpu_uuid=gpu,
        job=job,
        pre_existing=pre_existing,
    )


def live_policy(data: Mapping[str, Any] | None = None, source: str = "<test policy>") -> Policy:
    """The one place tests get a policy that writes to Kubernetes: `data` (default: the shipped
    default policy's file) with `actuation: live` at the top level. Shipped policies and files
    without `actuation` are shadow (they write nothing); tests of real writes build here."""
    base = load_yaml_file(DEFAULT_POLICY) if data is None else dict(data)
    return policy_from_dict({**base, "actuation": "live"}, source)
