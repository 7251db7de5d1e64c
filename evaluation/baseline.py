"""The static alert rules teams run today on dcgm-exporter, as a baseline suite for `eval`.

Issue 4 asks for the scored table of these rules side by side with the detectors:
    XID != 0                      -> gpu_xid, critical
    GPU temperature > 85 for 5m   -> gpu_throttle, warning
    increase(DBE) > 0             -> gpu_memory, critical
    GPU utilisation == 0 for 10m  -> anomaly, warning (the usual "stuck GPU" page; reported as
                                     anomaly so that scoring counts it as a page, as teams do)
with Prometheus alerting semantics: `for:` means the expression held at every evaluation for
that long. They are deliberately naive (that is the point of the comparison), and not in the
detector registry, so no config can enable them by accident.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from detectors.base import Detector, DetectorSpec, node_name
from detectors.findings import Finding, FindingKind, Severity
from detectors.signals import GPU_TEMP, UTIL, XID, increase, scrape_interval, value
from detectors.state import KeyedArrays, align, gpu_keys
from detectors.suite import DetectorSuite
from observer.fleet.model import FleetSnapshot

DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"


@dataclass(frozen=True, slots=True)
class Params:
    temp_c: float = 85.0
    temp_for: float = 300.0
    idle_for: float = 600.0
    lookback: float = 300.0
    """Prometheus' default lookback: a sample this old still answers the rule's query."""


@dataclass(frozen=True, slots=True)
class State:
    gpus: KeyedArrays

    def nbytes(self) -> int:
        return self.gpus.nbytes()


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
    ]
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
    return findings, State(cur.replace(hot_since=hot_since, idle_since=idle_since))


SPEC = DetectorSpec(
    name="static_rules",
    params_type=Params,
    detect=detect,
    kinds=(
        FindingKind.GPU_XID,
        FindingKind.GPU_MEMORY,
        FindingKind.GPU_THROTTLE,
        FindingKind.ANOMALY,
    ),
    enabled_by_default=False,
    doc="The four static dcgm-exporter alert rules (baseline for eval; not registered).",
)


def static_rules_suite() -> DetectorSuite:
    return DetectorSuite((Detector(SPEC, Params()),))
