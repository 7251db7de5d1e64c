"""One cause, one incident: a straggler that gpu_throttle explains is folded into the throttle.

A throttled GPU in a synchronous job really is its job's straggler (the clock cut slows every
step), so both detectors are right, and without this a person got two incidents for one cause:
"cooling on GPU 5" (cordon, notify) and "GPU 5 paces job ml/t3" (migrate, approval). The cause
is the actionable one. So while gpu_throttle reports a GPU, and for `EXPLAINED_FOR` seconds after
(a straggler's evidence drains for 4-6 minutes once its cause ends), a straggler finding on
that GPU is kept but lowered to info, with `explained_by` in its evidence; the throttle finding
carries the job it paces (`paces_job`) and says so in its summary. A straggler raised before
the throttle was (a throttle the detector cannot see: no reason bits and no visible cause)
stays a warning: nothing explains it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from detectors.findings import Finding, FindingKind, Severity

EXPLAINED_FOR = 600.0
"""Seconds after gpu_throttle last reported a GPU during which a straggler on it is explained.
The straggler's CUSUM drains at ~k = 0.035 gap-seconds per second from h = 8.4 (4 min), longer
where the GPU's own offsets leave a small gap: measured 315 s after a power brake ended in
lab/suite/mixed-1024-15s. A straggler still there 10 minutes on has another cause."""


def fold_explained(
    findings: Iterable[Finding], throttled: Mapping[str, float], now: float
) -> tuple[list[Finding], Mapping[str, float]]:
    """(findings of one cycle, GPU uuid -> when gpu_throttle last reported it) -> the findings
    with explained stragglers lowered to info and throttles annotated, and the new memory."""
    items = list(findings)
    seen = {u: t for u, t in throttled.items() if now - t <= EXPLAINED_FOR}
    for f in items:
        if f.kind == FindingKind.GPU_THROTTLE and f.gpu_uuid:
            seen[f.gpu_uuid] = now
    paced = {
        f.gpu_uuid: f.job
        for f in items
        if f.kind == FindingKind.STRAGGLER and f.gpu_uuid in seen and f.job
    }
    out: list[Finding] = []
    for f in items:
        if f.kind == FindingKind.STRAGGLER and f.gpu_uuid in seen:
            f = dataclasses.replace(
                f,
                severity=Severity.INFO,
                summary=f"{f.summary} (explained by gpu_throttle on this GPU)",
                evidence={**f.evidence, "explained_by": "gpu_throttle"},
            )
        elif f.kind == FindingKind.GPU_THROTTLE and f.gpu_uuid in paced:
            job = paced[f.gpu_uuid]
            f = dataclasses.replace(
                f,
                summary=f"{f.summary}; paces job {job}",
                evidence={**f.evidence, "paces_job": job},
            )
        out.append(f)
    return out, MappingProxyType(seen)
