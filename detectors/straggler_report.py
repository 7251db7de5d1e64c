"""The straggler's output: findings for a GPU pacing its job and for a node's group of a job
that is uniformly busier (stage imbalance), from the readings detectors/straggler.py judged."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from detectors.base import gpu_context, node_name
from detectors.findings import Finding, FindingKind, Severity
from observer.fleet.model import NO_INDEX, FleetSnapshot

GROUP_ACTION = "rebalance the job's pipeline stages or data sharding"


def _rounded(x: float, digits: int) -> float | None:
    return None if np.isnan(x) else round(float(x), digits)


@dataclass(frozen=True, slots=True)
class StragglerReport:
    """One cycle's readings, per GPU row (per job for `signal` and `job_gpus`)."""

    snapshot: FleetSnapshot
    now: float
    min_gap: float
    activity: np.ndarray
    signal: list[str]
    job_median: np.ndarray
    job_gpus: np.ndarray
    mates_median: np.ndarray
    group_median: np.ndarray
    group_size: np.ndarray
    clock: np.ndarray | None
    clock_median: np.ndarray
    watts: np.ndarray | None
    evidence: np.ndarray
    threshold: np.ndarray
    job_sd: np.ndarray
    group_evidence: np.ndarray

    def bad_gpus(self, active: np.ndarray, onset: np.ndarray, action: str) -> list[Finding]:
        """A warning per GPU that paces its job."""
        g = self.snapshot.gpus
        findings: list[Finding] = []
        for row in np.flatnonzero(active):
            i = int(row)
            job_index = int(g.job_index[i])
            if job_index < 0:
                continue
            node = node_name(self.snapshot, int(g.node_index[i]))
            job = str(self.snapshot.jobs[job_index].key)
            pod = int(g.pod_index[i])
            pods = self.snapshot.pods
            rank = pods[pod].rank if 0 <= pod < len(pods) else NO_INDEX
            activity, median = float(self.activity[i]), float(self.job_median[i])
            findings.append(
                Finding(
                    kind=FindingKind.STRAGGLER,
                    severity=Severity.WARNING,
                    summary=(
                        f"GPU {g.device_index[i]} on {node} paces job {job}: activity "
                        f"{activity:.2f} vs peers' median {median:.2f}"
                    ),
                    first_seen=float(onset[i]),
                    last_seen=self.now,
                    node=node,
                    gpu_uuid=str(g.uuid[i]),
                    job=job,
                    evidence={
                        **gpu_context(self.snapshot, i),
                        "rank": None if rank == NO_INDEX else int(rank),
                        "signal": self.signal[job_index],
                        "activity": round(activity, 3),
                        "job_median_activity": round(median, 3),
                        "node_peers_median_activity": _rounded(self.mates_median[i], 3),
                        "sm_clock_mhz": None if self.clock is None else float(self.clock[i]),
                        "job_median_sm_clock_mhz": None
                        if np.isnan(self.clock_median[i])
                        else float(self.clock_median[i]),
                        "power_w": None if self.watts is None else float(self.watts[i]),
                        "peers": int(self.job_gpus[job_index]),
                        "min_gap": self.min_gap,
                        "persisted_s": round(self.now - float(onset[i]), 1),
                        "evidence_gap_s": round(float(self.evidence[i]), 2),
                        "threshold_gap_s": round(float(self.threshold[i]), 2),
                        "job_scrape_sd": _rounded(self.job_sd[i], 3),
                    },
                    recommended_action=action,
                )
            )
        return findings

    def slow_groups(self, active: np.ndarray, onset: np.ndarray) -> list[Finding]:
        """Job-level info, once per (job, node) whose GPUs are uniformly busier than the job."""
        g = self.snapshot.gpus
        findings: list[Finding] = []
        seen: set[tuple[int, int]] = set()
        for row in np.flatnonzero(active):
            i = int(row)
            key = (int(g.job_index[i]), int(g.node_index[i]))
            if key in seen or key[0] < 0:
                continue
            seen.add(key)
            node = node_name(self.snapshot, key[1])
            job = str(self.snapshot.jobs[key[0]].key)
            group, median = float(self.group_median[i]), float(self.job_median[i])
            findings.append(
                Finding(
                    kind=FindingKind.STRAGGLER,
                    severity=Severity.INFO,
                    summary=(
                        f"job {job}: its GPUs on {node} are uniformly busier than the rest "
                        f"({group:.2f} vs {median:.2f}): stage or data imbalance, "
                        "not a bad GPU"
                    ),
                    first_seen=float(onset[i]),
                    last_seen=self.now,
                    node=node,
                    job=job,
                    evidence={
                        "group_median_activity": round(group, 3),
                        "job_median_activity": round(median, 3),
                        "group_gpus": int(self.group_size[i]),
                        "persisted_s": round(self.now - float(onset[i]), 1),
                        "evidence_gap_s": round(float(self.group_evidence[i]), 2),
                    },
                    recommended_action=GROUP_ACTION,
                )
            )
        return findings
