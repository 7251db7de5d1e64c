"""The static alert rules teams run today on dcgm-exporter, as a baseline suite for `eval`.

Issue 4 asks for the scored table of these rules side by side with the detectors:
    XID != 0                      -> gpu_xid, critical
    GPU temperature > 85 for 5m   -> gpu_throttle, warning
    increase(DBE) > 0             -> gpu_memory, critical
    GPU utilisation == 0 for 10m  -> anomaly, warning (the usual "stuck GPU" page; reported as
                                     anomaly so that scoring counts it as a page, as teams do)
and, so that the comparison is fair (issue 15), the rules a good team adds for lost GPUs and
link errors:
    up{job="dcgm-exporter"} == 0 for 5m
                                  -> monitoring_gap, warning, on the node
    DCGM_FI_DEV_GPU_TEMP offset 10m unless on (UUID) DCGM_FI_DEV_GPU_TEMP,
      and on (Hostname) up == 1   -> gpu_lost, critical: a GPU that reported 10 minutes ago and
                                     no longer does while its node's exporter answers
    rate(NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL[5m]) > 1
                                  -> gpu_interconnect, warning (more than 300 in 5 minutes)
    rate(PCIE_REPLAY_COUNTER[5m]) * 60 > 20
                                  -> gpu_interconnect, warning (above the healthy BER ceiling)
with Prometheus alerting semantics: `for:` means the expression held at every evaluation for
that long, and a series that stops still answers queries for the lookback (5 min), so a lost
GPU's series is absent only after it. They are simple on purpose (that is the point of the
comparison), and not in the detector registry, so no config can enable them by accident.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from detectors.base import Detector, DetectorSpec, node_name
from detectors.findings import Finding, FindingKind, Severity
from detectors.signals import GPU_TEMP, UTIL, XID, increase, rate, scrape_interval, value
from detectors.state import KeyedArrays, align, gpu_keys
from detectors.suite import DetectorSuite
from observer.fleet.model import FleetSnapshot

DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
NVLINK_CRC = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
PCIE_REPLAY = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"


@dataclass(frozen=True, slots=True)
class Params:
    temp_c: float = 85.0
    temp_for: float = 300.0
    idle_for: float = 600.0
    lookback: float = 300.0
    """Prometheus' default lookback: a sample this old still answers the rule's query."""
    down_for: float = 300.0
    lost_offset: float = 600.0
    nvlink_crc_per_s: float = 1.0
    pcie_replays_per_min: float = 20.0


@dataclass(frozen=True, slots=True)
class State:
    gpus: KeyedArrays
    seen: dict[str, tuple[str, float]]
    """UUID -> (node, last time its series answered): what `offset 10m` still sees."""
    down_since: dict[str, float]

    def nbytes(self) -> int:
        return self.gpus.nbytes() + 120 * (len(self.seen) + len(self.down_since))


_SPEC = {"hot_since": (np.float64, np.nan), "idle_since": (np.float64, np.nan)}


def detect(
    snapshot: FleetSnapshot, state: State | None, now: float, params: Params
) -> tuple[list[Finding], State]:
    g = snapshot.gpus
    cur = align(state.gpus if state else None, gpu_keys(snapshot), _SPEC)
    age = max(params.lookback, scrape_interval(snapshot))
    xid = value(snapshot, XID, now, age)
    temp = value(snapshot, GPU_TEMP, now, age)
    util = value(snapshot, UTIL, now, age)
    dbe = increase(snapshot, DBE, now, age)
    n = len(g)
    with np.errstate(invalid="ignore"):
        hot = temp > params.temp_c if temp is not None else np.zeros(n, dtype=bool)
        idle = util == 0 if util is not None else np.zeros(n, dtype=bool)
    hot_since = np.where(hot, np.fmin(cur["hot_since"], now), np.nan)
    idle_since = np.where(idle, np.fmin(cur["idle_since"], now), np.nan)
    crc = rate(snapshot, NVLINK_CRC, now, age)
    pcie = rate(snapshot, PCIE_REPLAY, now, age)
    rules = [
        (
            FindingKind.GPU_XID,
            Severity.CRITICAL,
            (xid > 0) if xid is not None else None,
            "XID != 0",
        ),
        (
            FindingKind.GPU_MEMORY,
            Severity.CRITICAL,
            (dbe > 0) if dbe is not None else None,
            "DBE increase",
        ),
        (
            FindingKind.GPU_THROTTLE,
            Severity.WARNING,
            now - hot_since >= params.temp_for,
            "temperature > 85 for 5m",
        ),
        (
            FindingKind.ANOMALY,
            Severity.WARNING,
            now - idle_since >= params.idle_for,
            "utilisation == 0 for 10m",
        ),
        (
            FindingKind.GPU_INTERCONNECT,
            Severity.WARNING,
            (crc > params.nvlink_crc_per_s) if crc is not None else None,
            "NVLink CRC rate > 1/s",
        ),
        (
            FindingKind.GPU_INTERCONNECT,
            Severity.WARNING,
            (pcie * 60.0 > params.pcie_replays_per_min) if pcie is not None else None,
            "PCIe replays > 20/min",
        ),
    ]
    findings = _fired(snapshot, rules, now)
    seen, down_since = _lost_and_down(snapshot, state, now, params, temp, findings)
    new = cur.replace(hot_since=hot_since, idle_since=idle_since)
    return findings, State(new, seen, down_since)


def _fired(
    snapshot: FleetSnapshot,
    rules: list[tuple[FindingKind, Severity, np.ndarray | None, str]],
    now: float,
) -> list[Finding]:
    """One finding per GPU a rule's mask holds for (rules without data are skipped)."""
    g = snapshot.gpus
    findings: list[Finding] = []
    for kind, sev, mask, name in rules:
        if mask is None:
            continue
        for i in np.flatnonzero(np.nan_to_num(mask, nan=0.0).astype(bool)):
            node = node_name(snapshot, int(g.node_index[i]))
            findings.append(
                Finding(
                    kind,
                    sev,
                    f"static rule: {name}",
                    now,
                    now,
                    node=node,
                    gpu_uuid=str(g.uuid[i]),
                    evidence={"rule": name},
                )
            )
    return findings


def _lost_and_down(
    snapshot: FleetSnapshot,
    state: State | None,
    now: float,
    params: Params,
    temp: np.ndarray | None,
    findings: list[Finding],
) -> tuple[dict[str, tuple[str, float]], dict[str, float]]:
    """The `up == 0 for 5m` and `offset 10m unless` rules (appends to `findings`)."""
    seen = dict(state.seen) if state else {}
    down_since = dict(state.down_since) if state else {}
    tel = snapshot.telemetry
    names = [str(n.name) for n in snapshot.nodes]
    up: dict[str, bool] = {}
    if tel is not None and len(tel.node_up) == len(names):
        up = {name: bool(tel.node_up[k]) for k, name in enumerate(names)}
    answering = _answering(snapshot, temp, seen, now)
    for name in names:
        is_up = up.get(name, name in answering)
        if is_up:
            down_since.pop(name, None)
            continue
        since = down_since.setdefault(name, now)
        if now - since >= params.down_for:
            findings.append(
                Finding(
                    FindingKind.MONITORING_GAP,
                    Severity.WARNING,
                    "static rule: up == 0 for 5m",
                    now,
                    now,
                    node=name,
                    evidence={"rule": "up == 0 for 5m"},
                )
            )
    for uuid, (node, last) in list(seen.items()):
        if now - last > params.lost_offset + params.lookback:
            del seen[uuid]  # `offset 10m` no longer sees it either
            continue
        if last >= now or node not in answering or not up.get(node, True):
            continue
        findings.append(
            Finding(
                FindingKind.GPU_LOST,
                Severity.CRITICAL,
                "static rule: GPU series absent (offset 10m unless now)",
                now,
                now,
                node=node,
                gpu_uuid=uuid,
                evidence={"rule": "GPU absent while its exporter is up"},
            )
        )
    return seen, down_since


def _answering(
    snapshot: FleetSnapshot,
    temp: np.ndarray | None,
    seen: dict[str, tuple[str, float]],
    now: float,
) -> set[str]:
    """Nodes with a GPU answering now; marks each answering GPU seen now (in `seen`)."""
    g = snapshot.gpus
    answering: set[str] = set()
    if temp is not None:
        for i in np.flatnonzero(~np.isnan(temp)):
            node = node_name(snapshot, int(g.node_index[i]))
            if node is None:
                continue
            seen[str(g.uuid[i])] = (node, now)
            answering.add(node)
    return answering


SPEC = DetectorSpec(
    name="static_rules",
    params_type=Params,
    detect=detect,
    kinds=(
        FindingKind.GPU_XID,
        FindingKind.GPU_MEMORY,
        FindingKind.GPU_THROTTLE,
        FindingKind.ANOMALY,
        FindingKind.GPU_INTERCONNECT,
        FindingKind.GPU_LOST,
        FindingKind.MONITORING_GAP,
    ),
    enabled_by_default=False,
    doc="Static dcgm-exporter alert rules as teams write them (baseline for eval; not registered).",
)


def static_rules_suite() -> DetectorSuite:
    return DetectorSuite((Detector(SPEC, Params()),))
