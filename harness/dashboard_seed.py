"""Seeded journals for the dashboard tests and benchmark, written by the real engine.

`seed_cluster` runs the real `DecisionJournal` on findings over `FakeCluster` (the remediation
tests' in-memory cluster): incidents open, the default policy decides (quarantine runs, drain
and job restart wait for a person), one drain is approved and then refused by the runner's gate
because its node became protected meanwhile (so it is shown as denied with that reason).
`seed_repairs` runs one GPU's repair at the grain of one GPU (fence, reset, the real
`diagnose_and_return` job) on three GPUs: one passes and returns, one fails and is marked, one
still waits for its pod to leave.
`bulk_incidents` adds a month of history quickly through the store's batch upsert.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dashboards.settings import DashboardConfig, DashboardSettings
from detectors.findings import Finding, FindingKind, Severity
from harness.benchmark_fleet import Fleet
from harness.fake_cluster import FakeCluster
from metering import Meter
from observer.fleet.model import frozen_map
from remediations.capabilities import FencedGpu, WriteContext
from remediations.cluster_view import ClusterView
from remediations.cycle import RemediationCycle
from remediations.decision_journal import DecisionJournal
from remediations.executor import Executor
from remediations.policy import Policy, load_policy, policy_from_dict
from remediations.scheduled.context import JobContext, JobRequest
from remediations.scheduled.diagnose import DiagnoseParams, run_diagnose
from remediations.scheduled.diagnose_targets import DIAG_GPU_LABEL
from remediations.store import IncidentRecord, Store
from remediations.types import ACTION_ANNOTATION, Actuation, IncidentId, IncidentStatus, Intent

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


@dataclass
class _Rule:
    """gpufleet's DeviceTaintRule on one GPU, as `fence_gpu`'s verification reads it."""

    uuid: str
    node: str
    effect: str
    key: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    ours: bool = True
    device: str | None = None


@dataclass(frozen=True)
class _Job:
    outcome: str | None
    detail: str = ""


class _DraCluster(FakeCluster):
    """FakeCluster with DRA DeviceTaintRules, reset Jobs and diagnostic Jobs: enough of a GPU
    node for the GPU-grain playbooks and `diagnose_and_return` to run as they do on a cluster.
    `diag` says what each GPU's diagnostic Job ends with."""

    def __init__(self, diag: Mapping[str, str], held: Mapping[str, str]) -> None:
        super().__init__({"pool-c": 8})  # three faulty of eight: under the breaker's 50%
        self.held = dict(held)
        self.rules: dict[str, _Rule] = {}
        self.jobs: dict[tuple[str, str], str] = {}
        self.diag = dict(diag)
        self.index = {u: i for i, u in enumerate(diag)}

    def view(self, now: float = 0.0) -> ClusterView:
        return dataclasses.replace(
            super().view(now), gpu_index=dict(self.index), pod_of_gpu=dict(self.held)
        )

    def cluster_view(self, taken_at: float = 0.0) -> ClusterView:
        return self.view(taken_at)

    def apply(self, intent: Intent, ctx: WriteContext) -> str:
        a = intent.args
        if intent.op == "fence_device":
            self.rules[str(a["rule"])] = _Rule(
                str(a["uuid"]), intent.target, str(a["effect"]), str(a["key"]),
                annotations={ACTION_ANNOTATION: ctx.action_id},
            )  # fmt: skip
        elif intent.op == "unfence_device":
            self.rules.pop(str(a["rule"]), None)
        elif intent.op == "label_device_rule":
            self.rules[str(a["rule"])].labels.update(a["labels"])
        elif intent.op == "run_node_job":
            self.jobs[(str(a["namespace"]), str(a["name"]))] = "passed"
        else:
            return super().apply(intent, ctx)
        return "ok"

    def device_taint_rule(self, name: str) -> _Rule | None:
        return self.rules.get(name)

    def node_job(self, namespace: str, name: str) -> _Job | None:
        got = self.jobs.get((namespace, name))
        return None if got is None else _Job(got, f"job {got}")

    def fenced_gpus(self) -> list[FencedGpu]:
        return [
            FencedGpu(name, r.node, self.index[r.uuid], r.uuid, r.effect, dict(r.labels),
                      dict(r.annotations))
            for name, r in self.rules.items()
        ]  # fmt: skip

    # ---- NodeJobs: the diagnostic Jobs -------------------------------------------------------

    def ensure(
        self, namespace: str, node: str, name: str, image: str, command: list[str],
        labels: dict[str, str], gpus: int = 0,
    ) -> str:  # fmt: skip
        if (namespace, name) in self.jobs:
            return "exists"
        uuid = next(u for u in self.diag if u.lower()[:63] == labels[DIAG_GPU_LABEL])
        self.jobs[(namespace, name)] = self.diag[uuid]
        return "created"

    def outcome(self, namespace: str, name: str) -> str | None:
        return self.jobs.get((namespace, name))

    def exists(self, namespace: str, name: str) -> bool:
        return (namespace, name) in self.jobs


REPAIRED = "GPU-c0-3"
"""Fenced, reset, diagnosed (passed) and returned to service by `seed_repairs`."""
BROKEN = "GPU-c1-5"
"""Fenced, reset, failed its diagnostic: marked for replacement, a person's."""
HELD = "GPU-c2-0"
"""Fenced; its pod has not left yet, so neither the reset nor the diagnostic has run."""
_GPU_FAULT = {"kinds": ["gpu_xid"], "severities": ["critical"]}
REPAIR_POLICY: dict[str, Any] = {
    "version": 1,
    "actuation": "live",
    "gates": {"blast_radius": {"max_nodes": 4, "max_percent_of_pool": 100},
              "attempts": {"cooldown": "1m"}},
    "hysteresis": {"open_after": 1, "resolve_after": 2},
    "rules": [
        {"name": "fence-faulty-gpu", "match": _GPU_FAULT, "playbook": "fence_gpu",
         "mode": "auto", "params": {"effect": "NoExecute"}},
        {"name": "reset-faulty-gpu", "match": _GPU_FAULT, "playbook": "reset_gpu",
         "mode": "auto"},
    ],
}  # fmt: skip
"""The GPU-grain rules of the lifecycle test (tests/remediations/test_gpu_lifecycle_sim.py)."""


def seed_repairs(store: Store, now: float | None = None) -> None:
    """Two GPUs through the GPU-grain lifecycle, written by the real engine, executor and
    `diagnose_and_return` job: XID 48 on REPAIRED and BROKEN; each is fenced and reset
    (automatic rules), then diagnosed: REPAIRED passes and its rule is deleted, BROKEN fails,
    its rule is labelled for replacement and a `needs_person` row names it. HELD is fenced too,
    but a pod still holds it: its reset waits (journaled), and so does its diagnostic."""
    t = (time.time() if now is None else now) - 900
    cluster = _DraCluster(
        {REPAIRED: "passed", BROKEN: "failed", HELD: "passed"}, {HELD: "serving/serve-0"}
    )
    cluster.add_pod("serving", "serve-0", "pool-c-0002", owner_kind="StatefulSet")
    policy = policy_from_dict(REPAIR_POLICY, "seed-gpu-grain")
    clock = [t]
    loop = RemediationCycle(policy, store, cluster, "seed", started_at=t - 600,
                            clock=lambda: clock[0])  # fmt: skip
    findings = [
        _finding(FindingKind.GPU_XID, Severity.CRITICAL, t, node=node, gpu_uuid=uuid)
        for node, uuid in (
            ("pool-c-0000", REPAIRED),
            ("pool-c-0001", BROKEN),
            ("pool-c-0002", HELD),
        )
    ]
    for k in range(3):  # fence, then the reset once the fence is done
        clock[0] = t + 30 * k
        loop.tick(findings, clock[0], cluster.view(clock[0]))
        loop.act(clock[0], cluster.view(clock[0]))
    for k in range(3):  # the resets cleared the others: their incidents resolve
        clock[0] = t + 300 + 10 * k
        loop.tick(findings[2:], clock[0], cluster.view(clock[0]))
    clock[0] = t + 360
    ctx = JobContext(loop, lambda: clock[0], diagnostics=cluster, lock=threading.Lock(),
                     gpu_holders=lambda: dict(cluster.held))  # fmt: skip
    p = DiagnoseParams(wait=0, poll=0.01)
    out = run_diagnose(ctx, JobRequest("diag", "diagnose_and_return", t, p, t, clock[0]))
    assert out.ok, out


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
    """Metering's latest state and rollups for the benchmark fleet (harness.benchmark_fleet):
    `n_gpus` GPUs in four node pools, teams on every pod, `cycles` cycles `step` apart ending
    now, recorded by the real `Meter`."""
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
