"""Every playbook through the real `kubernetes` client against the simulator's Kubernetes API.

The small simulated fleet (harness/k8s_sim.py): h100-0000 runs `ml/train` (2 ranks, PDB
maxUnavailable 1), h100-0001 `serving/serve` (2 pods), h100-0002 `ml/big` (1 rank x 8 GPUs),
h100-0003 is empty; every node runs the DaemonSet pods. The simulator's wall clock is manual:
the actuator's back-off sleeps advance it, so PDB retries happen in simulated time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from detectors.findings import Finding, FindingKind, Severity
from harness.k8s_sim import Sim, annotations_of, labels_of, present, running_sim, spec
from kube.actuator import KubeActuator
from remediations.decision_journal import DecisionJournal
from remediations.executor import Executor
from remediations.policy import Policy
from remediations.store import ActionRecord, Store
from remediations.types import (
    ACTION_ANNOTATION,
    INCIDENT_ANNOTATION,
    OWNER_ANNOTATION,
    QUARANTINE_LABEL,
    QUARANTINE_TAINT,
    REASON_ANNOTATION,
    REQUEST_ANNOTATION,
    ActionState,
)
from remediations.validation import record_diagnosis
from tests.remediations.helpers import finding as _finding
from tests.remediations.helpers import live_policy

T0 = 1_700_000_000.0


def finding(*, first_seen: float = T0, **kw: Any) -> Finding:
    return _finding(first_seen=first_seen, **kw)


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(tmp_path, history=5000) as s:
        yield s


@pytest.fixture
def actuator(sim: Sim) -> Iterator[KubeActuator]:
    clock = [0.0]

    def sleep(seconds: float) -> None:  # back-off passes in simulated time
        clock[0] += seconds
        sim.advance(seconds)

    act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig, clock=lambda: clock[0], sleep=sleep)
    yield act
    act.close()


def _policy(playbook: str, kind: str = "gpu_xid", **params: object) -> Policy:
    return live_policy({
        "hysteresis": {"open_after": 1},
        "gates": {"blast_radius": {"max_nodes": 3, "max_percent_of_pool": 100},
                  "protected": {"namespaces": ["kube-system"]}},
        "rules": [{"name": playbook, "match": {"kinds": [kind]}, "playbook": playbook,
                   "mode": "auto", "params": params}],
    })  # fmt: skip


def _run(
    policy: Policy,
    store: Store,
    act: KubeActuator,
    findings: list[Finding],
    sim: Sim,
    passes: int = 3,
) -> list[ActionRecord]:
    eng = DecisionJournal(policy, store, started_at=T0 - 60)
    eng.cycle(findings, act.cluster_view(T0), T0)
    runner = Executor(policy, store, act, owner="sim-test", open_incidents=eng.open_incident_ids)
    now = T0
    for _ in range(passes):
        now += 31
        sim.advance(31)
        runner.run(act.cluster_view(now), now)
    return store.actions()


def test_quarantine_taints_labels_and_annotates(
    sim: Sim, actuator: KubeActuator, store: Store
) -> None:
    (a,) = _run(_policy("quarantine"), store, actuator, [finding(node="h100-0003")], sim)
    assert a.state is ActionState.DONE, a
    node = actuator.core.read_node("h100-0003")
    assert spec(node).unschedulable
    # the node lifecycle controller's taint of the cordon, then gpufleet's
    assert [(t.key, t.value, t.effect) for t in present(spec(node).taints, "taints")] == [
        ("node.kubernetes.io/unschedulable", None, "NoSchedule"),
        (QUARANTINE_TAINT, "gpu_xid", "NoSchedule"),
    ]
    assert labels_of(node)[QUARANTINE_LABEL] == "gpu_xid"
    ann = annotations_of(node)
    assert ann[ACTION_ANNOTATION] == a.id and ann[INCIDENT_ANNOTATION] == a.incident_id
    assert ann[OWNER_ANNOTATION] == "gpufleet" and ann[REASON_ANNOTATION].startswith("quarantine")
    writes = [r for r in store.audit_log() if r.kind == "k8s_write"]
    about = [w for w in writes if w.message.startswith("about to")]
    assert len(about) == 3 and len(writes) == 6  # journaled before and after each write


def test_drain_evicts_through_pdb_with_backoff_and_keeps_daemonsets(
    sim: Sim, actuator: KubeActuator, store: Store
) -> None:
    before = {p.name: p.uid for p in actuator.pods_on_node("h100-0000")}
    (a,) = _run(
        _policy("drain", timeout="5m", backoff_initial="5s"),
        store,
        actuator,
        [finding(node="h100-0000")],
        sim,
    )
    assert a.state is ActionState.DONE, a
    evicted = sorted(f"ml/{n}" for n in before if n.startswith("train-worker"))
    assert a.result == (  # the outcome says what the drain did, not only what is left
        f"evicted {len(evicted)} pod(s) from h100-0000 ({', '.join(evicted)}); none left"
    ), a.result
    left = actuator.pods_on_node("h100-0000")
    assert left and all(p.owner_kind == "DaemonSet" for p in left)
    assert {p.uid for p in left} <= set(before.values())  # DaemonSet pods untouched
    for rank in ("train-worker-0", "train-worker-1"):
        p = actuator.pod("ml", rank)
        assert p is not None and p.node != "h100-0000" and p.uid != before[rank]
        placements = [x for x in sim.cluster.pods_for_metrics() if x.name == rank]
        assert sum(x.end is not None for x in placements) == 1  # evicted exactly once
    assert spec(actuator.core.read_node("h100-0000")).unschedulable


def test_drain_gives_up_at_the_timeout_when_a_pdb_blocks(sim: Sim, store: Store) -> None:
    clock = [0.0]

    def sleep(seconds: float) -> None:  # time passes for the drain, not for the cluster
        clock[0] += seconds

    act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig, clock=lambda: clock[0], sleep=sleep)
    policy = _policy("drain", timeout="2m", backoff_initial="10s", backoff_max="30s")
    eng = DecisionJournal(policy, store, started_at=T0 - 60)
    eng.cycle([finding(node="h100-0000")], act.cluster_view(T0), T0)
    Executor(policy, store, act, "t").run(act.cluster_view(T0), T0 + 1)
    (a,) = store.actions()
    assert a.state is ActionState.FAILED and "disruption budget still blocks" in a.result
    assert 115 <= clock[0] <= 125  # backed off 10, 20, 30, 30, 30 ... within the 2 min
    act.close()


def test_restart_pod_and_restart_job(sim: Sim, actuator: KubeActuator, store: Store) -> None:
    serve0 = actuator.pod("serving", "serve-0")
    train = {n: actuator.pod("ml", n) for n in ("train-worker-0", "train-worker-1")}
    assert serve0 is not None
    hang = finding(kind=FindingKind.NCCL_HANG, node=None, gpu=None, job="ml/train")
    policy = live_policy({"rules": [
        {"name": "rj", "match": {"kinds": ["nccl_hang"]}, "playbook": "restart_job",
         "mode": "auto"},
        {"name": "rp", "match": {"kinds": ["gpu_xid"]}, "playbook": "restart_pod",
         "mode": "auto"}]})  # fmt: skip
    view = actuator.cluster_view(T0)
    gpu_finding = finding(node="h100-0001", gpu="GPU-serve")
    view = type(view)(view.nodes, view.pods, view.jobs, {"GPU-serve": "serving/serve-0"}, T0)
    eng = DecisionJournal(policy, store, started_at=T0 - 60)
    eng.cycle([hang, gpu_finding], view, T0)
    runner = Executor(policy, store, actuator, "t")
    for i in range(3):
        sim.advance(31)
        runner.run(actuator.cluster_view(T0 + 31 * (i + 1)), T0 + 31 * (i + 1))
    states = {a.playbook: a.state for a in store.actions()}
    assert states == {"restart_job": ActionState.DONE, "restart_pod": ActionState.DONE}
    new_serve = actuator.pod("serving", "serve-0")
    assert new_serve is None or new_serve.uid != serve0.uid
    for n, old in train.items():
        new = actuator.pod("ml", n)
        assert new is not None and old is not None and new.uid != old.uid
        assert new.phase == "Running"


def test_migrate_moves_the_job_off_the_node(sim: Sim, actuator: KubeActuator, store: Store) -> None:
    strag = finding(
        kind=FindingKind.STRAGGLER,
        severity=Severity.WARNING,
        node="h100-0002",
        gpu="GPU-x",
        job="ml/big",
    )
    (a,) = _run(_policy("migrate", kind="straggler"), store, actuator, [strag], sim)
    assert a.state is ActionState.DONE, a
    assert a.result.startswith("evicted 1 pod(s) from h100-0002 (ml/big-worker-0); "), a.result
    big = actuator.pod("ml", "big-worker-0")
    assert big is not None and big.node not in (None, "h100-0002")


def test_uncordon_leaves_a_persons_cordon_alone(
    sim: Sim, actuator: KubeActuator, store: Store
) -> None:
    actuator.core.patch_node("h100-0001", {"spec": {"unschedulable": True}})  # a person
    # the engine denies it (ownership) ...
    eng = DecisionJournal(_policy("uncordon"), store, started_at=T0 - 60)
    res = eng.cycle([finding(node="h100-0001")], actuator.cluster_view(T0), T0)
    assert "not changed by gpufleet" in res.decisions[0].reasons[0]
    # ... and the actuator refuses too, should an uncordon intent ever reach it
    from remediations.capabilities import WriteContext
    from remediations.types import Intent

    msg = actuator.apply(
        Intent("uncordon", "h100-0001", {"only_if_ours": True}),
        WriteContext("a", "i", "uncordon", "test"),
    )
    assert "left alone" in msg and spec(actuator.core.read_node("h100-0001")).unschedulable


def test_request_reboot_is_recorded_on_the_node(
    sim: Sim, actuator: KubeActuator, store: Store
) -> None:
    (a,) = _run(
        _policy("request_reboot"), store, actuator, [finding(node="h100-0003", gpu="GPU-3")], sim
    )
    assert a.state is ActionState.DONE
    ann = annotations_of(actuator.core.read_node("h100-0003"))
    assert ann[REQUEST_ANNOTATION] == "reboot:GPU-3" and ann[ACTION_ANNOTATION] == a.id


def test_api_errors_are_retried_and_write_once(
    sim: Sim, actuator: KubeActuator, store: Store
) -> None:
    sim.api.faults.add(r"^/api/v1/nodes/h100-0003$", 500, count=2, method="PATCH")
    (a,) = _run(_policy("cordon"), store, actuator, [finding(node="h100-0003")], sim, passes=4)
    assert a.state is ActionState.DONE, a
    retried = [r for r in store.audit_log() if "will be retried" in r.message]
    assert retried


def test_two_runners_race_and_each_step_runs_once(sim: Sim, store: Store) -> None:
    import threading

    data = _policy("quarantine").model_dump(mode="json")
    data["gates"]["breaker"]["threshold_percent"] = 100  # 3 of 4 nodes: keep the breaker out
    policy = live_policy(data)
    eng = DecisionJournal(policy, store, started_at=T0 - 60)
    acts = [KubeActuator.from_kubeconfig(sim.sa_kubeconfig) for _ in range(2)]
    fs = [finding(node=f"h100-000{i}", gpu=f"G{i}") for i in (1, 2, 3)]
    eng.cycle(fs, acts[0].cluster_view(T0), T0)
    runners = [Executor(policy, store, a, owner=f"r{i}") for i, a in enumerate(acts)]
    barrier = threading.Barrier(2)

    def go(r: Executor, a: KubeActuator) -> None:
        barrier.wait()
        r.run(a.cluster_view(T0 + 1), T0 + 1)

    threads = [threading.Thread(target=go, args=(r, a)) for r, a in zip(runners, acts, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r, a in zip(runners, acts, strict=True):  # a start that lost a race waits for a pass
        r.run(a.cluster_view(T0 + 2), T0 + 2)
    actions = store.actions()
    assert len(actions) == 3 and all(a.state is ActionState.DONE for a in actions), actions
    log = store.audit_log()
    for action in actions:
        mine = [r for r in log if r.action_id == action.id]
        assert sum("-> executing" in r.message for r in mine) == 1
        assert sum(r.message.startswith("did ") for r in mine) == len(action.plan)
    for a in acts:
        a.close()


def test_request_reset_and_uncordon_what_we_cordoned(
    sim: Sim, actuator: KubeActuator, store: Store
) -> None:
    policy = live_policy({
        "hysteresis": {"open_after": 1},
        "rules": [
            {"name": "c", "match": {"kinds": ["gpu_xid"]}, "playbook": "cordon", "mode": "auto"},
            {"name": "r", "match": {"kinds": ["gpu_xid"]}, "playbook": "request_reset",
             "mode": "auto"},
            {"name": "u", "match": {"kinds": ["gpu_throttle"]}, "playbook": "uncordon",
             "mode": "auto"},
        ],
    })  # fmt: skip
    _run(policy, store, actuator, [finding(node="h100-0003", gpu="GPU-9")], sim, passes=2)
    node = actuator.core.read_node("h100-0003")
    assert spec(node).unschedulable and annotations_of(node)[OWNER_ANNOTATION] == "gpufleet"
    assert annotations_of(node)[REQUEST_ANNOTATION] == "reset:GPU-9"
    # later a (hypothetical) all-clear rule undoes gpufleet's own cordon, once the XID has
    # stopped (its incident resolved) and a diagnostic has passed after the reset (the one
    # return rule refuses any return without both)
    eng = DecisionJournal(policy, store, started_at=T0 - 60)
    for t in (T0 + 10, T0 + 20, T0 + 30):
        eng.cycle([], actuator.cluster_view(t), t)
    later = T0 + 100
    record_diagnosis(store, later - 1, "node/h100-0003", "passed", node="h100-0003")
    eng.cycle(
        [
            finding(
                kind=FindingKind.GPU_THROTTLE,
                severity=Severity.WARNING,
                node="h100-0003",
                first_seen=later,
            )
        ],
        actuator.cluster_view(later),
        later,
    )
    Executor(policy, store, actuator, "t").run(actuator.cluster_view(later), later + 1)
    states = {a.playbook: a.state for a in store.actions()}
    assert states == {
        "cordon": ActionState.DONE,
        "request_reset": ActionState.DONE,
        "uncordon": ActionState.DONE,
    }
    node = actuator.core.read_node("h100-0003")
    assert not spec(node).unschedulable and OWNER_ANNOTATION not in annotations_of(node)


def test_failed_quarantine_rolls_back_on_the_api(
    sim: Sim, actuator: KubeActuator, store: Store
) -> None:
    sim.api.faults.add(r"^/api/v1/nodes/h100-0003$", 403, count=1, method="PATCH")
    policy = _policy("quarantine")
    eng = DecisionJournal(policy, store, started_at=T0 - 60)
    eng.cycle([finding(node="h100-0003")], actuator.cluster_view(T0), T0)
    # the first PATCH (cordon) is forbidden: permanent, nothing to undo yet
    Executor(policy, store, actuator, "t").run(actuator.cluster_view(T0), T0 + 1)
    (a,) = store.actions()
    assert a.state in (ActionState.FAILED, ActionState.ROLLED_BACK), a
    node = actuator.core.read_node("h100-0003")
    assert not spec(node).unschedulable and not spec(node).taints


def test_live_loop_quarantines_then_drains_after_approval(
    sim: Sim, actuator: KubeActuator, store: Store
) -> None:
    from remediations.cycle import RemediationCycle

    loop = RemediationCycle(live_policy(), store, actuator, "loop", started_at=T0 - 60)
    xid = finding(node="h100-0002", gpu="GPU-2")
    result, touched = loop.tick([xid], T0)
    assert {d.playbook: d.decision.value for d in result.decisions} == {
        "quarantine": "execute",
        "drain": "await_approval",
    }
    assert [a.playbook for a in touched] == ["quarantine"]
    drain = next(a for a in store.actions() if a.playbook == "drain")
    loop.engine.approve(drain.id, "alice", T0 + 10)
    for i in range(1, 4):
        sim.advance(31)
        t = T0 + 31 * i
        loop.tick([finding(node="h100-0002", gpu="GPU-2", last_seen=t)], t)
    done = store.get_action(drain.id)
    assert done is not None and done.state is ActionState.DONE
    big = actuator.pod("ml", "big-worker-0")
    assert big is not None and big.node != "h100-0002"
    dry = RemediationCycle(live_policy(), store, actuator, "dry", started_at=T0, shadow=True)
    assert dry.tick([], T0 + 200)[1] == []
