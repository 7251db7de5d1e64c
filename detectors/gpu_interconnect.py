"""gpu_interconnect: NVLink CRC flit errors and PCIe replays above what a healthy link produces.

Both are link-level retries: the data gets through, but each retry costs bandwidth and a
marginal link degrades into a hang or an XID 74. DCGM fails NVLink at >= 100 CRC flit errors per
second. For PCIe the budget is the link's specified bit error rate (1e-12) times its line rate:
about 0.96 replays per minute per Gen4 lane, ~15/min for an x16 link; a sustained rate above
that is a bad riser, slot or cable. Rates come from reset-aware counter increases, and must hold
for `min_seconds` so one burst during a link retrain is not a finding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from detectors.base import DetectorSpec, Needs, gpu_context, node_name
from detectors.findings import Finding, FindingKind, Severity
from detectors.signals import dt_since, hysteresis, persist, rate, scrape_interval
from detectors.state import GpuCycleState, align, gpu_keys
from observer.fleet.model import FleetSnapshot

NVLINK_CRC = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
PCIE_REPLAY = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"


@dataclass(frozen=True, slots=True)
class Params:
    nvlink_crc_per_second: float = 100.0
    """DCGM's failure threshold for NVLink CRC flit errors."""
    pcie_replays_per_minute: float = 16.0
    """Gen4 x16 error budget at BER 1e-12 (0.96/min/lane x 16); Gen5 links may use 31."""
    min_seconds: float = 60.0
    """The rate must stay above its limit for a minute (two 30 s scrapes)."""
    max_age_intervals: float = 2.5


State = GpuCycleState


_SPEC = {"acc": (np.float32, 0.0), "onset": (np.float64, np.nan)}


def detect(
    snapshot: FleetSnapshot, state: State | None, now: float, params: Params
) -> tuple[list[Finding], State]:
    g = snapshot.gpus
    n = len(g)
    interval = scrape_interval(snapshot)
    age = params.max_age_intervals * interval
    cur = align(state.gpus if state else None, gpu_keys(snapshot), _SPEC)
    dt = dt_since(state.last_now if state else np.nan, now, interval)
    crc = rate(snapshot, NVLINK_CRC, now, age)
    pcie = rate(snapshot, PCIE_REPLAY, now, age)
    crc_bad = (
        np.zeros(n, dtype=bool)
        if crc is None
        else np.nan_to_num(crc) >= params.nvlink_crc_per_second
    )
    pcie_pm = None if pcie is None else pcie * 60.0
    pcie_bad = (
        np.zeros(n, dtype=bool)
        if pcie_pm is None
        else np.nan_to_num(pcie_pm) > params.pcie_replays_per_minute
    )
    flagged = crc_bad | pcie_bad
    acc = persist(cur["acc"], flagged, dt, params.min_seconds)
    active = hysteresis(acc, ~np.isnan(cur["onset"]), params.min_seconds)
    onset = np.where(active, np.fmin(cur["onset"], now - acc.astype(np.float64)), np.nan)
    findings: list[Finding] = []
    for i in np.flatnonzero(active):
        node = node_name(snapshot, int(g.node_index[i]))
        ctx = gpu_context(snapshot, int(i))
        what, action = _what_and_action(bool(crc_bad[i]), bool(pcie_bad[i]))
        findings.append(
            Finding(
                kind=FindingKind.GPU_INTERCONNECT,
                severity=Severity.WARNING,
                summary=f"GPU {g.device_index[i]} on {node}: {what} above the healthy rate",
                first_seen=float(onset[i]),
                last_seen=now,
                node=node,
                gpu_uuid=str(g.uuid[i]),
                evidence={
                    **ctx,
                    "nvlink_crc_per_s": None if crc is None else float(crc[i]),
                    "nvlink_crc_limit_per_s": params.nvlink_crc_per_second,
                    "pcie_replays_per_min": None if pcie_pm is None else float(pcie_pm[i]),
                    "pcie_replay_limit_per_min": params.pcie_replays_per_minute,
                    "persisted_s": round(float(acc[i]), 1),
                },
                recommended_action=action,
            )
        )
    return findings, State(cur.replace(acc=acc, onset=onset), now)


def _what_and_action(crc_bad: bool, pcie_bad: bool) -> tuple[str, str]:
    """Which links err (a subsiding episode names none), and what to check for them."""
    links = [s for s, bad in (("NVLink CRC errors", crc_bad), ("PCIe replays", pcie_bad)) if bad]
    what = " and ".join(links) or "link errors (subsiding)"
    action = (
        "check the NVLink/NVSwitch path (nvidia-smi nvlink -e), reseat or RMA; "
        "drain the node if a job on it slows or hangs"
        if crc_bad
        else "check the PCIe riser, slot and link width/speed; drain the node before reseating"
    )
    return what, action


NEEDS = Needs(
    ((NVLINK_CRC, PCIE_REPLAY),),
    (NVLINK_CRC, PCIE_REPLAY),
    {
        NVLINK_CRC: "no NVLink CRC error rates: PCIe replays only",
        PCIE_REPLAY: "no PCIe replays: NVLink CRC errors only",
    },
    {NVLINK_CRC: (PCIE_REPLAY,), PCIE_REPLAY: (NVLINK_CRC,)},
)
"""The fields this detector reads, for detectors.coverage: what it needs to run at all,
what full evidence is, and what it infers from when a field is missing."""


SPEC = DetectorSpec(
    needs=NEEDS,
    name="gpu_interconnect",
    params_type=Params,
    detect=detect,
    kinds=(FindingKind.GPU_INTERCONNECT,),
    severities=(Severity.WARNING,),
    doc="NVLink CRC flit error rate >= 100/s; PCIe replays above the link's error budget.",
)
