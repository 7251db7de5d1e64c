"""Seeded journals for the dashboard tests and benchmark, written by the real engine.

`seed_cluster` runs the real `DecisionJournal` on findings over `FakeCluster` (the remediation
tests' in-memory cluster): incidents open, the default policy decides (quarantine runs, drain
and job restart wait for a person), one drain is approved and then refused by the runner's gate
because its node became protected meanwhile (so it is shown as denied with that reason).
`bulk_incidents` adds a month of history quickly through the store's batch upsert.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from dashboards.settings import DashboardConfig, DashboardSettings
from detectors.findings import Finding, FindingKind, Severity
from metering import Meter
from observer.fleet.model import frozen_map
from remediations.decision_journal import DecisionJournal
from remediations.executor import Executor
from remediations.policy import Policy, load_policy
from remediations.store import IncidentRecord, Store
from remediations.types import Actuation, IncidentId, IncidentStatus
from tests.remediations.fake_cluster import FakeCluster

PROTECTED = {"gpufleet.io/protected": "true"}


def seed_policy() -> Policy:
    """The one policy every dashboard test seeds with: the shipped default, `actuation: live`
    (the seed's cluster is the in-memory FakeCluster, so the runner's gates and writes run)."""
    return load_policy().model_copy(update={"actuation": Actuation.LIVE})


def _finding(kind: FindingKind, sev: Severity, t: float, **kw: str) -> Finding:
    evidence = {"persisted_s": 120.0, "threshold_gap_s": 30.0, "job_median_activity": 0.9}
    return Finding(
        kind=kind,
        severity=sev,
        summary=f"{kind.value} on {kw.get('node') or kw.get('job')}",
        first_seen=t - 120,
        last_seen=t,
        evidence={**evidence, "activity": 0.4, "xid": 79},
        **kw,  # type: ignore[arg-type]
    )


def seed_cluster(store: Store, now: float | None = None) -> dict[str, str]:
    """Incidents and actions in `store`'s cluster; returns ids by role."""
    t = time.time() if now is None else now
    cluster = FakeCluster({"pool-a": 6, "pool-b": 6})
    cluster.add_pod("ml", "w-0", "pool-a-0001", job="ml/train")
    cluster.add_pod("ml", "w-1", "pool-a-0002", job="ml/train")
    eng = DecisionJournal(seed_policy(), store, started_at=t - 600)
    findings = [
        _finding(FindingKind.GPU_XID, Severity.CRITICAL, t - 60, node="pool-a-0001",
                 gpu_uuid="GPU-a1-0"),
        _finding(FindingKind.GPU_XID, Severity.CRITICAL, t - 60, node="pool-b-0003",
                 gpu_uuid="GPU-b3-2"),
        _finding(FindingKind.NCCL_HANG, Severity.CRITICAL, t - 60, job="ml/train"),
        _finding(FindingKind.GPU_THROTTLE, Severity.WARNING, t - 60, node="pool-b-0004",
                 gpu_uuid="GPU-b4-1"),
    ]  # fmt: skip
    for k in range(3):
        eng.cycle(findings, cluster.view(t - 60 + k), t - 60 + k)
    pending = {a.target: a for a in store.actions() if a.state.value == "awaiting_approval"}
    denied = pending["node/pool-b-0003"]
    eng.approve(denied.id, "alice@example.com", t - 50)
    cluster.nodes["pool-b-0003"].labels.update(PROTECTED)
    # The runner re-checks the gates: the protected node now refuses the approved drain. Only
    # approved actions on protected nodes are left for it (the quarantines were done above).
    Executor(seed_policy(), store, cluster, owner="seed").run(cluster.view(t - 40), t - 40)
    return {
        "pending": pending["node/pool-a-0001"].id,
        "denied": denied.id,
        "hang": pending["job/ml/train"].id,
    }


def bulk_incidents(store: Store, n: int, days: float = 30.0, now: float | None = None) -> None:
    """`n` resolved incidents spread over the last `days` (a month of history)."""
    t = time.time() if now is None else now
    kinds = [k for k in FindingKind if k is not FindingKind.MONITORING_GAP]
    records = []
    for i in range(n):
        opened = t - days * 86400.0 * (i + 1) / (n + 1)
        kind = kinds[i % len(kinds)]
        node = f"node-{i % 1250:04d}"
        records.append(
            IncidentRecord(
                id=IncidentId(f"bulk{i:08d}"),
                cluster=store.cluster,
                kind=kind.value,
                entity_key=f"{kind.value}|{node}|{i}",
                node=node,
                gpu_uuid=f"GPU-{i % 10000:05d}",
                job=None,
                status=IncidentStatus.RESOLVED,
                severity=("critical", "warning", "info")[i % 3],
                summary=f"{kind.value} on {node}",
                opened_at=opened,
                updated_at=opened + 900,
                resolved_at=opened + 900,
                first_seen=opened - 60,
                last_seen=opened + 600,
                seen_cycles=20,
                healthy_cycles=3,
                evidence={"persisted_s": 600.0, "value": float(i % 97)},
            )
        )
    for i in range(0, n, 5000):
        store.save_incidents(records[i : i + 5000])


def write_settings(path: Path, url: str, cluster: str, **dashboard: object) -> Path:
    s = DashboardSettings(
        store_url=url, cluster=cluster, dashboard=DashboardConfig.model_validate(dashboard)
    )
    path.write_text(json.dumps(s.model_dump(mode="json")))
    return path


def seed_fleet(
    store: Store, n_gpus: int, cycles: int = 4, step: float = 300.0, now: float | None = None
) -> None:
    """Metering's latest state and rollups for the benchmark fleet (bench.detectors_cycle):
    `n_gpus` GPUs in four node pools, teams on every pod, `cycles` cycles `step` apart ending
    now, recorded by the real `Meter`."""
    from bench.detectors_cycle import Fleet

    t = time.time() if now is None else now
    fleet = Fleet(n_gpus)
    quarter = max(1, len(fleet.nodes) // 4)
    meter = Meter(store)
    for k in range(cycles):
        snap = fleet.snapshot(k)[1]
        nodes = tuple(
            dataclasses.replace(
                n, labels=frozen_map({"gpufleet.io/pool": f"pool-{min(i // quarter, 3)}"})
            )
            for i, n in enumerate(snap.nodes)
        )
        pods = tuple(
            dataclasses.replace(p, labels=frozen_map({"team": f"team-{i % 5}"}))
            for i, p in enumerate(snap.pods)
        )
        snap = dataclasses.replace(snap, nodes=nodes, pods=pods)
        meter.record_cycle(snap, now=t - step * (cycles - 1 - k))


FLEET_JOB = "team-0/job-0000"
"""A training job of `seed_fleet`'s fleet (16 nodes x 8 GPUs)."""
FLEET_STRAGGLER = "GPU-00000013-bench"
"""Its GPU on gpu-node-00002, device 3."""


def seed_straggler(store: Store, now: float | None = None) -> None:
    """An open straggler incident on one rank of FLEET_JOB (as the detector would open it)."""
    t = time.time() if now is None else now
    store.save_incidents(
        [
            IncidentRecord(
                id=IncidentId("strag0001"), cluster=store.cluster, kind="straggler",
                entity_key=f"straggler|gpu-node-00002|{FLEET_STRAGGLER}|{FLEET_JOB}",
                node="gpu-node-00002", gpu_uuid=FLEET_STRAGGLER, job=FLEET_JOB,
                status=IncidentStatus.OPEN, severity="warning",
                summary="GPU 3 on gpu-node-00002 paces job team-0/job-0000: activity 0.52 vs "
                "peers' median 0.91",
                opened_at=t - 600, updated_at=t, resolved_at=None, first_seen=t - 700,
                last_seen=t, seen_cycles=20, healthy_cycles=0,
                evidence={"activity": 0.52, "job_median_activity": 0.91,
                          "evidence_gap_s": 96.0, "threshold_gap_s": 60.0},
            )
        ]
    )  # fmt: skip
