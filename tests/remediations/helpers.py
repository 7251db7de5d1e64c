"""Small builders shared by the remediation tests."""

from __future__ import annotations

from detectors.findings import Finding, FindingKind, Severity


def finding(
    kind: FindingKind = FindingKind.GPU_XID,
    severity: Severity = Severity.CRITICAL,
    node: str | None = "p-0000",
    gpu: str | None = "GPU-0",
    job: str | None = None,
    first_seen: float = 1000.0,
    last_seen: float | None = None,
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
    )
