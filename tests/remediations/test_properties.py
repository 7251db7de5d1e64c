"""Property: no sequence of findings, approvals, rejections, failures, pauses and breaker resets
makes the engine exceed blast radius, rate, cooldown or attempt limits, or act while paused or
tripped.

Each example drives the real engine, runner and journal (in-memory SQLite) against the in-memory
cluster; the invariants are checked on the cluster after every step and on the journal's start
times at the end.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from detectors.findings import Finding, FindingKind, Severity
from harness.fake_cluster import FakeCluster
from remediations.decision_journal import DecisionJournal
from remediations.executor import Executor
from remediations.store import Store
from remediations.types import ActionState
from tests.remediations.helpers import live_policy

T0 = 1_700_000_000.0
POOLS = {"a": 3, "b": 6}
POLICY = live_policy(
    {
        "hysteresis": {"open_after": 1, "resolve_after": 2},
        "gates": {
            "stale_after": "10m",
            "blast_radius": {"max_nodes": 2, "max_percent_of_pool": 34},
            "rate": {"max_actions_per_hour": 3},
            "attempts": {"cooldown": "10m", "max_attempts": 2, "window": "1h"},
            "breaker": {"threshold_percent": 50, "window": "5m", "min_nodes": 3},
            "protected": {"namespaces": ["kube-system"]},
        },
        "rules": [
            {
                "name": "q",
                "match": {"kinds": ["gpu_xid"], "severities": ["critical"]},
                "playbook": "quarantine",
                "mode": "auto",
            },
            {
                "name": "d",
                "match": {"kinds": ["gpu_xid"], "severities": ["warning"]},
                "playbook": "drain",
                "mode": "auto",
                "params": {"timeout": "1m"},
            },
            {
                "name": "c",
                "match": {"kinds": ["gpu_memory"]},
                "playbook": "cordon",
                "mode": "approval",
            },
            {
                "name": "r",
                "match": {"kinds": ["nccl_hang"]},
                "playbook": "restart_job",
                "mode": "auto",
            },
            {
                "name": "m",
                "match": {"kinds": ["straggler"]},
                "playbook": "migrate",
                "mode": "approval",
            },
            {
                "name": "b",
                "match": {"kinds": ["gpu_throttle"]},
                "playbook": "request_reboot",
                "mode": "auto",
            },
        ],
    }
)
NODES = [f"{p}-{i:04d}" for p, n in POOLS.items() for i in range(n)]
JOBS = ["ml/j0", "ml/j1", "ml/j2"]
KINDS = [
    FindingKind.GPU_XID,
    FindingKind.GPU_MEMORY,
    FindingKind.NCCL_HANG,
    FindingKind.STRAGGLER,
    FindingKind.GPU_THROTTLE,
    FindingKind.MONITORING_GAP,
]

finding_spec = st.tuples(
    st.integers(0, len(KINDS) - 1),
    st.integers(0, len(NODES) - 1),
    st.sampled_from([Severity.CRITICAL, Severity.WARNING]),
    st.integers(0, len(JOBS) - 1),
)
steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("cycle"),
            st.lists(finding_spec, min_size=1, max_size=6),
            st.sampled_from([0, 30, 300, 700, 4000]),
            st.booleans(),
        ),
        st.tuples(
            st.just("cycle"),
            st.lists(finding_spec, min_size=1, max_size=3),
            st.sampled_from([30, 700]),
            st.just(True),
        ),
        st.tuples(st.just("run"), st.sampled_from([0, 30, 600, 3700])),
        st.tuples(st.just("approve"), st.integers(0, 20)),
        st.tuples(st.just("reject"), st.integers(0, 20)),
        st.tuples(st.just("pause")),
        st.tuples(st.just("resume")),
        st.tuples(st.just("reset")),
        st.tuples(
            st.just("fail"),
            st.sampled_from(["", "label", "evict_pods", "delete_pods", "annotate", "cordon"]),
        ),
    ),
    min_size=1,
    max_size=30,
)


def _cluster() -> FakeCluster:
    c = FakeCluster(POOLS, cpu_nodes=6)
    for i, node in enumerate(NODES):
        c.add_pod("ml", f"w-{i}", node, job=JOBS[i % len(JOBS)], owner_kind="StatefulSet")
    return c


def _finding(spec: tuple[int, int, Severity, int], t: float) -> Finding:
    k, n, sev, j = spec
    kind = KINDS[k]
    node = NODES[n]
    if kind is FindingKind.NCCL_HANG:
        return Finding(kind, sev, "hang", t - 30, t, job=JOBS[j])
    gpu = None if kind is FindingKind.MONITORING_GAP else f"GPU-{node}"
    job = JOBS[n % len(JOBS)] if kind is FindingKind.STRAGGLER else None
    return Finding(kind, sev, f"{kind.value}", t - 30, t, node=node, gpu_uuid=gpu, job=job)


def _check_radius(cluster: FakeCluster) -> None:
    down = cluster.unavailable_gpu_nodes()
    br = POLICY.gates.blast_radius
    assert len(down) <= br.max_nodes, down
    for pool, size in POOLS.items():
        allowed = max(1, math.floor(br.max_percent_of_pool * size / 100))
        assert sum(1 for n in down if n.startswith(pool + "-")) <= allowed, (pool, down)


def _check_journal(store: Store) -> None:
    g = POLICY.gates
    starts = sorted(a.started_at for a in store.actions() if a.started_at is not None)
    for i, t in enumerate(starts):  # rate: any 1 h window holds at most max starts
        in_window = [s for s in starts[: i + 1] if t - 3600 < s <= t]
        assert len(in_window) <= g.rate.max_actions_per_hour, starts
    per_target: dict[tuple[str, str], list[float]] = defaultdict(list)
    for a in store.actions():
        if a.started_at is not None:
            per_target[(a.playbook, a.target)].append(a.started_at)
    for key, ts in per_target.items():
        ts.sort()
        for x, y in itertools.pairwise(ts):
            assert y - x >= g.attempts.cooldown, (key, ts)
        for t in ts:
            assert sum(1 for s in ts if t - g.attempts.window < s <= t) <= g.attempts.max_attempts


def _run(runner: Executor, store: Store, cluster: FakeCluster, now: float) -> None:
    state = store.engine_state()
    before = len(cluster.writes)
    runner.run(cluster.view(now), now)
    if state.paused or state.breaker_tripped:
        assert len(cluster.writes) == before, "acted while paused or tripped"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_engine_never_exceeds_its_limits(plan: list[tuple]) -> None:  # type: ignore[type-arg]
    store = Store.open("sqlite://", cluster="prop")
    cluster = _cluster()
    eng = DecisionJournal(POLICY, store, started_at=T0 - 60)
    runner = Executor(POLICY, store, cluster, "prop", open_incidents=eng.open_incident_ids)
    now = T0
    try:
        for step in plan:
            op = step[0]
            if op == "cycle":
                now += step[2]
                eng.cycle([_finding(s, now) for s in step[1]], cluster.view(now), now)
                if step[3]:
                    _run(runner, store, cluster, now)
            elif op == "run":
                now += step[1]
                _run(runner, store, cluster, now)
            elif op in ("approve", "reject"):
                waiting = store.actions([ActionState.AWAITING_APPROVAL])
                if waiting:
                    a = waiting[step[1] % len(waiting)]
                    if op == "approve":
                        eng.approve(a.id, "alice", now)
                    else:
                        eng.reject(a.id, "alice", now, "no")
            elif op == "pause":
                store.set_paused(True, "ops", "prop", now)
            elif op == "resume":
                store.set_paused(False, "ops", "prop", now)
            elif op == "reset":
                store.reset_breaker("ops", now)
            elif op == "fail":
                cluster.fail_ops = {step[1]} if step[1] else set()
            _check_radius(cluster)
        _check_journal(store)
        started = sum(1 for a in store.actions() if a.started_at is not None)
        event(f"actions started: {min(started, 5)}{'+' if started >= 5 else ''}")
        event(f"writes: {'some' if cluster.writes else 'none'}")
    finally:
        store.close()
