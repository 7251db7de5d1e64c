"""reset_gpu and reboot_node through the journal, the executor and the real `kubernetes` client
against the simulator, which runs the reset Jobs and a reboot daemon honouring the node contract.

h100-0002 runs `ml/big` on all 8 GPUs and its GPU 0 has a double-bit ECC fault (unhealthy);
h100-0003 is empty, and the scenario says resetting its GPU 5 fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from detectors.findings import Finding, FindingKind, Severity
from errors import PermanentError, TemporaryError
from gpufleet.service.actuator import CachedActuator
from harness.k8s_sim import Sim, running_sim
from kube.actuator import KubeActuator
from remediations.capabilities import WriteContext
from remediations.cluster_view import ClusterView
from remediations.decision_journal import DecisionJournal
from remediations.executor import Executor
from remediations.playbooks import PLAYBOOKS, NoPlan, Subject, VerifyStatus
from remediations.policy import Policy, policy_from_dict
from remediations.store import ActionRecord, Store
from remediations.types import (
    REBOOT_ANNOTATION,
    REBOOTS_ANNOTATION,
    ActionState,
    IncidentId,
    Intent,
)
from simulator.layout import gpu_uuid
from tests.remediations.helpers import live_policy

FAULTY = ("h100-0002", 0)
ROLLED_BACK = ActionState.ROLLED_BACK
FAILS = ("h100-0003", 5)


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(
        tmp_path,
        faults=[{"kind": "xid48_dbe", "node": FAULTY[0], "gpu": FAULTY[1], "start": 0}],
        reset_failures=[f"{FAILS[0]}/{FAILS[1]}"],
        reset_seconds=10,
        reboot_seconds=60,
    ) as s:
        yield s


@pytest.fixture
def actuator(sim: Sim) -> Iterator[KubeActuator]:
    act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig, clock=sim.cluster.clock)
    yield act
    act.close()


def view(sim: Sim, act: KubeActuator, hide: frozenset[str] = frozenset()) -> ClusterView:
    """The live view plus what the exporters' pod mapping says: which pod holds which GPU
    (except the GPUs in `hide`, which the exporters attribute to no pod)."""
    v = act.cluster_view(sim.cluster.clock())
    held = {
        gpu_uuid("small", p.node, d): f"{p.namespace}/{p.name}"
        for p in sim.cluster.running_pods()
        for d in p.gpu_indices
        if gpu_uuid("small", p.node, d) not in hide
    }
    index = {gpu_uuid("small", n, d): d for n in v.nodes for d in range(8)}
    return replace(v, pod_of_gpu=held, gpu_index=index)


def finding(node: str, gpu: int | None, now: float) -> Finding:
    return Finding(
        kind=FindingKind.GPU_XID,
        severity=Severity.CRITICAL,
        summary=f"XID 48 on {node}",
        first_seen=now,
        last_seen=now,
        node=node,
        gpu_uuid=gpu_uuid("small", node, gpu) if gpu is not None else None,
    )


def rules(playbook: str, **params: object) -> dict[str, Any]:
    return {
        "hysteresis": {"open_after": 1},
        "rules": [{"name": "repair", "match": {"kinds": ["gpu_xid"]}, "playbook": playbook,
                   "mode": "auto", "params": params}],
    }  # fmt: skip


class Loop:
    def __init__(self, policy: Policy, store: Store, act: KubeActuator, sim: Sim) -> None:
        self.sim, self.act, self.store = sim, act, store
        t = sim.cluster.clock()
        self.journal = DecisionJournal(policy, store, started_at=t - 60)
        self.runner = Executor(
            policy, store, act, owner="t", open_incidents=self.journal.open_incident_ids
        )
        self.hide: frozenset[str] = frozenset()

    def cycle(self, findings: list[Finding]) -> list[str]:
        now = self.sim.cluster.clock()
        v = view(self.sim, self.act, self.hide)
        found = [replace(f, last_seen=now) for f in findings]
        reasons = [r for d in self.journal.cycle(found, v, now).decisions for r in d.reasons]
        self.runner.run(v, now)
        return reasons

    def run(self, seconds: float, step: float = 10) -> list[ActionRecord]:
        for _ in range(int(seconds / step)):
            self.sim.advance(step)
            now = self.sim.cluster.clock()
            self.runner.run(view(self.sim, self.act, self.hide), now)
        return self.store.actions()


def jobs(sim: Sim) -> list[dict[str, Any]]:
    return sim.cluster.store.objects("jobs", "gpufleet-jobs")[1]


def test_reset_waits_for_the_pod_then_resets_the_gpu(
    sim: Sim, actuator: KubeActuator, store: Store
) -> None:
    node, gpu = FAULTY
    assert (node, gpu) in sim.cluster.devices.unhealthy
    loop = Loop(live_policy(rules("reset_gpu")), store, actuator, sim)
    f = finding(node, gpu, sim.cluster.clock())
    (why,) = loop.cycle([f])
    assert why.startswith("plan: waits for pod ml/big-") and gpu_uuid("small", node, gpu) in why
    assert jobs(sim) == [] and store.actions() == []
    journaled = [r for e in store.audit_log() for r in e.detail.get("reasons", [])]
    assert journaled == [why]  # the journal says what it waits for

    # the pod leaves the GPU (its node cordoned, the pod deleted: it restarts on h100-0003)
    n = sim.cluster.get("nodes", "", node)
    sim.cluster.write("nodes", {**n, "spec": {**n["spec"], "unschedulable": True}})
    (holder,) = [p for p in sim.cluster.running_pods() if p.node == node]
    sim.cluster.delete("pods", holder.namespace, holder.name)
    loop.cycle([f])
    (job,) = jobs(sim)
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeName"] == node and pod["tolerations"] == [{"operator": "Exists"}]
    (c,) = pod["containers"]
    assert c["command"] == ["nvidia-smi", "-r", "-i", "0"]
    assert c["securityContext"] == {"privileged": True}
    (a,) = loop.run(30)
    assert a.state is ActionState.DONE, a
    assert (node, gpu) not in sim.cluster.devices.unhealthy  # the reset cleared the fault
    assert sim.cluster.get("nodes", "", node)["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    loop.run(20)  # a later pass finds the same Job: nothing is reset twice
    assert len(jobs(sim)) == 1


def test_reset_waits_while_a_resource_claim_reserves_the_gpu_the_exporter_misses(
    sim: Sim, actuator: KubeActuator, store: Store
) -> None:
    """On a DRA node the exporter may attribute the GPU to no pod (its DRA support off): the plan
    goes ahead, but the claim that reserves the device holds the Job back until it is gone."""
    node, gpu = FAULTY
    uuid = gpu_uuid("small", node, gpu)
    loop = Loop(live_policy(rules("reset_gpu")), store, actuator, sim)
    loop.hide = frozenset({uuid})
    f = finding(node, gpu, sim.cluster.clock())
    loop.cycle([f])
    (a,) = store.actions()
    assert jobs(sim) == [] and a.progress == 0  # planned, pinned: held back, nothing created
    (said,) = [e.message for e in store.audit_log() if "will be retried" in e.message]
    assert f"GPU {uuid} (gpu.nvidia.com/{node}/gpu-0) is reserved by a ResourceClaim" in said
    assert "for ml/big-worker-0" in said
    loop.run(20)
    assert jobs(sim) == []  # still reserved: still waiting

    n = sim.cluster.get("nodes", "", node)  # the pod leaves (cordon, delete): its claim goes
    sim.cluster.write("nodes", {**n, "spec": {**n["spec"], "unschedulable": True}})
    sim.cluster.delete("pods", "ml", "big-worker-0")
    (a,) = loop.run(40)
    assert a.state is ActionState.DONE, a
    (job,) = jobs(sim)
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][-1] == "0"
    assert (
        a.plan[0].args["claims"] == f"free: no ResourceClaim reserves gpu.nvidia.com/{node}/gpu-0"
    )


def test_without_the_claims_api_the_reset_relies_on_the_exporter(
    sim: Sim, actuator: KubeActuator, store: Store
) -> None:
    sim.api.faults.add("/resourceclaims$", status=404, count=100)  # a cluster before DRA's GA
    loop = Loop(live_policy(rules("reset_gpu")), store, actuator, sim)
    loop.cycle([finding(*FAILS, sim.cluster.clock())])
    (a,) = store.actions()
    assert a.plan[0].args["claims"] == "not checked: the cluster serves no ResourceClaims"
    assert len(jobs(sim)) == 1


def test_a_failing_reset_fails_the_action_with_the_jobs_reason(
    sim: Sim, actuator: KubeActuator, store: Store
) -> None:
    loop = Loop(live_policy(rules("reset_gpu")), store, actuator, sim)
    loop.cycle([finding(*FAILS, sim.cluster.clock())])
    (a,) = loop.run(30)
    assert a.state is ActionState.FAILED
    assert "reset job gpufleet-jobs/gpufleet-reset-" in (a.result or "")
    assert "GPU 5 reset failed" in (a.result or "")
    (job,) = jobs(sim)
    assert job["status"]["failed"] == 1
    assert [c["type"] for c in job["status"]["conditions"]] == ["FailureTarget", "Failed"]
    # as on a real cluster, the Job's condition says only that the backoff limit was reached;
    # nvidia-smi's words are its pod's termination message, where gpufleet read them
    assert (
        job["status"]["conditions"][-1]["message"] == "Job has reached the specified backoff limit"
    )
    name = job["metadata"]["name"]
    (pod,) = [
        p
        for p in sim.cluster.store.objects("pods", "gpufleet-jobs")[1]
        if p["metadata"]["labels"].get("batch.kubernetes.io/job-name") == name
    ]
    assert pod["status"]["phase"] == "Failed"
    (container,) = pod["status"]["containerStatuses"]
    said = container["state"]["terminated"]["message"]
    assert "GPU 5 reset failed" in said
    status = actuator.node_job("gpufleet-jobs", name)
    assert status is not None and status.detail.endswith(f"; {said}")


def test_a_reset_job_on_a_gpu_in_use_fails_like_nvidia_smi(
    sim: Sim, actuator: KubeActuator
) -> None:
    """The simulator is not fooled either: a reset Job that finds a process on the GPU fails."""
    busy = gpu_uuid("small", "h100-0000", 1)
    p, v = PLAYBOOKS["reset_gpu"], view(sim, actuator)
    unknown = p.plan(
        Subject(IncidentId("i"), "gpu_xid", "critical", "", "h100-0000", busy),
        replace(v, pod_of_gpu={}),  # no GPU -> pod mapping at all: any pod on the node may hold it
        p.params({}),
    )
    assert isinstance(unknown, NoPlan) and "waits for pod ml/train-" in unknown.reason
    plan = p.plan(
        Subject(IncidentId("i"), "gpu_xid", "critical", "", "h100-0000", busy),
        replace(v, pod_of_gpu={g: k for g, k in v.pod_of_gpu.items() if g != busy}),  # stale
        p.params({}),
    )
    assert not isinstance(plan, NoPlan)
    reset = plan.intents[0]
    assert "created" in actuator.apply(reset, WriteContext("a1", "i", "reset_gpu", "test"))
    assert "exists" in actuator.apply(reset, WriteContext("a1", "i", "reset_gpu", "test"))
    with pytest.raises(PermanentError, match="belongs to action a1"):
        actuator.apply(reset, WriteContext("a2", "i", "reset_gpu", "test"))
    sim.advance(1)  # the Job starts
    sim.advance(11)  # and ends, reset_seconds later
    status = actuator.node_job("gpufleet-jobs", str(plan.intents[0].args["name"]))
    assert status is not None and status.outcome == "failed"
    assert "being used by some other process (pod ml/train-" in status.detail
    service = CachedActuator(actuator, None, None)  # what `gpufleet run` hands the executor
    verdict = p.verify(plan.intents, service, p.params({}))
    assert verdict.status is VerifyStatus.FAILED
    assert "being used by some other process" in verdict.detail


def test_reboot_holds_a_slot_and_verifies_on_a_new_boot_id(
    sim: Sim, actuator: KubeActuator, store: Store
) -> None:
    loop = Loop(live_policy(rules("reboot_node", max_concurrent=1)), store, actuator, sim)
    node = "h100-0001"
    before = sim.cluster.get("nodes", "", node)["status"]["nodeInfo"]["bootID"]
    loop.cycle([finding(node, None, sim.cluster.clock())])
    marked = sim.cluster.get("nodes", "", node)["metadata"]["annotations"]
    assert marked[REBOOT_ANNOTATION].endswith(f":{before}")
    # the lock is the cluster's: another node's reboot waits while this one holds the slot
    other = PLAYBOOKS["reboot_node"].plan(
        Subject(IncidentId("j"), "gpu_xid", "critical", "", "h100-0003"),
        view(sim, actuator),
        PLAYBOOKS["reboot_node"].params({"max_concurrent": 1}),
    )
    assert isinstance(other, NoPlan) and "waits for a reboot slot" in other.reason
    mark = actuator.pin(Intent("mark_reboot", "h100-0003", {"max_concurrent": 1}))
    with pytest.raises(TemporaryError, match="reboot lock"):
        actuator.apply(mark, WriteContext("b", "j", "reboot_node", "test"))

    (a,) = loop.run(90)
    assert a.state is ActionState.DONE, a
    after = sim.cluster.get("nodes", "", node)
    assert after["status"]["nodeInfo"]["bootID"] != before
    assert REBOOT_ANNOTATION not in after["metadata"]["annotations"]
    assert len(after["metadata"]["annotations"][REBOOTS_ANNOTATION].split(",")) == 1
    assert not [p for p in sim.cluster.running_pods() if p.node == node and p.start < a.created_at]
    assert actuator.apply(mark, WriteContext("b", "j", "reboot_node", "test")).startswith("marked")

    # the loop guard reads the node's own record of gpufleet's reboots
    again = PLAYBOOKS["reboot_node"].plan(
        Subject(IncidentId("k"), "gpu_xid", "critical", "", node),
        view(sim, actuator),
        PLAYBOOKS["reboot_node"].params({"max_concurrent": 5, "max_reboots": 1}),
    )
    assert isinstance(again, NoPlan) and "a person decides" in again.reason


def test_shadow_writes_nothing(sim: Sim, actuator: KubeActuator, store: Store) -> None:
    shadow = policy_from_dict(rules("reset_gpu"), "<shadow>")
    loop = Loop(shadow, store, actuator, sim)
    loop.cycle([finding(*FAILS, sim.cluster.clock())])
    reboot = Loop(policy_from_dict(rules("reboot_node"), "<shadow>"), store, actuator, sim)
    reboot.cycle([finding("h100-0001", None, sim.cluster.clock())])
    states = sorted(a.state.value for a in store.actions())
    assert states == ["shadow", "shadow"]
    assert jobs(sim) == []
    assert REBOOT_ANNOTATION not in sim.cluster.get("nodes", "", "h100-0001")["metadata"].get(
        "annotations", {}
    )


def test_a_repair_clears_the_xid_gauge_in_the_metrics() -> None:
    """What `simulator.serve` wires: a successful reset ends the GPU's fault in the metrics.
    Shown on the `simple` layout, whose gauge shows only the active fault (the 4.x gauge is
    sticky: a reset does not clear it, below)."""
    from harness.k8s_sim import small_scenario
    from simulator.engine import FleetSimulator

    fault = [{"kind": "xid48_dbe", "node": "h100-0002", "gpu": 0, "start": 0}]
    sc = small_scenario(faults=fault, exporter={"version": "simple"})
    engine = FleetSimulator(sc)
    pos = engine.layout.gpu_position("h100-0002", 0)
    t = sc.start + 600
    assert engine.sample(t).metrics["DCGM_FI_DEV_XID_ERRORS"][pos] == 48
    engine.end_faults("h100-0002", 0, t)
    assert engine.sample(t + 60).metrics["DCGM_FI_DEV_XID_ERRORS"][pos] == 0
    assert engine.sample(t - 60).metrics["DCGM_FI_DEV_XID_ERRORS"][pos] == 48  # history stays
    real = FleetSimulator(small_scenario(faults=fault))  # 4.x, the default
    real.end_faults("h100-0002", 0, t)
    assert real.sample(t + 60).metrics["DCGM_FI_DEV_XID_ERRORS"][pos] == 45  # 48's follower, kept


def test_reboot_in_job_mode_writes_the_sentinel_file_through_a_job(
    sim: Sim, actuator: KubeActuator, store: Store
) -> None:
    loop = Loop(live_policy(rules("reboot_node", mode="job")), store, actuator, sim)
    node = "h100-0003"
    before = sim.cluster.get("nodes", "", node)["status"]["nodeInfo"]["bootID"]
    loop.cycle([finding(node, None, sim.cluster.clock())])
    (job,) = jobs(sim)
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeName"] == node
    assert pod["volumes"] == [
        {"name": "host", "hostPath": {"path": "/var/run", "type": "Directory"}}
    ]
    assert pod["containers"][0]["command"] == ["touch", "/var/run/reboot-required"]
    (a,) = loop.run(100)
    assert a.state is ActionState.DONE, a
    assert sim.cluster.get("nodes", "", node)["status"]["nodeInfo"]["bootID"] != before
    loop.run(30)
    assert sim.cluster.repairs.boots == {node: 1}  # one reboot: neither signal outlives it


def test_a_failed_reset_is_retried_after_its_cooldown_then_goes_to_a_person(
    sim: Sim, actuator: KubeActuator, store: Store
) -> None:
    """A reset Job that fails is tried again, no sooner than the cooldown after the last
    attempt, and after `max_attempts` a person is told instead of a fourth Job."""
    policy = rules("reset_gpu")
    policy["gates"] = {"attempts": {"cooldown": "60s", "max_attempts": 3}}
    loop = Loop(live_policy(policy), store, actuator, sim)
    f = finding(*FAILS, sim.cluster.clock())
    for _ in range(40):  # 400 s of cycles every 10 s: the fault persists throughout
        loop.cycle([f])
        sim.advance(10)
    acts = sorted(store.actions(), key=lambda a: a.created_at)
    assert [a.state for a in acts] == [ActionState.FAILED] * 3
    assert [a.attempt for a in acts] == [1, 2, 3]
    for a in acts:
        assert "GPU 5 reset failed" in (a.result or ""), a.result
    # bounded, with backoff: each retry starts at least the cooldown after the previous failed
    assert all(a.started_at is not None for a in acts)
    gaps = [(b.started_at or 0.0) - a.updated_at for a, b in pairwise(acts)]
    assert all(g >= 60 for g in gaps), gaps
    # the Kubernetes writes: one Job per attempt, each failed, none written twice
    made = jobs(sim)
    assert len(made) == 3 and len({j["metadata"]["name"] for j in made}) == 3
    assert all(j["status"].get("failed") == 1 for j in made)
    created = [
        r for r in store.audit_log() if r.kind == "k8s_write" and r.message.startswith("did ")
    ]
    assert sorted(str(r.action_id) for r in created) == sorted(a.id for a in acts)
    # after the budget: a person is asked, once, naming the target and the attempts
    uuid = gpu_uuid("small", *FAILS)
    told = [r for r in store.audit_log() if r.kind == "needs_person"]
    assert len(told) == 1, [r.message for r in told]
    assert told[0].target == f"gpu/{uuid}"
    assert "3 reset_gpu attempts" in told[0].message and "escalate" in told[0].message


def test_a_reboot_that_never_comes_back_is_retried_then_goes_to_a_person(tmp_path: Path) -> None:
    """The node's reboot daemon takes it down and it stays NotReady: the action fails when
    its verification times out, the next attempt waits for the cooldown, and past the attempt
    budget a person is told instead of a third reboot."""
    with running_sim(tmp_path, reboot_seconds=100_000) as sim:
        act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig, clock=sim.cluster.clock)
        store = Store.open(f"sqlite:///{tmp_path / 'reboot.db'}", cluster="small")
        try:
            policy = rules("reboot_node", execute_timeout=120, max_reboots=5)
            policy["gates"] = {"attempts": {"cooldown": "60s", "max_attempts": 2}}
            loop = Loop(live_policy(policy), store, act, sim)
            node = "h100-0001"
            f = finding(node, None, sim.cluster.clock())
            for _ in range(40):
                loop.cycle([f])
                sim.advance(10)
            acts = sorted(store.actions(), key=lambda a: a.created_at)
            assert [(a.attempt, a.state) for a in acts] == [(1, ROLLED_BACK), (2, ROLLED_BACK)]
            assert all("still executing after 120s" in (a.result or "") for a in acts)
            first, second = (a.started_at or 0.0 for a in acts)
            # the first ran out its 120 s; the retry waits the 60 s cooldown after that failure
            # (not after the attempt's start, which the timeout had long outlasted)
            assert acts[0].updated_at >= first + 120
            assert second >= acts[0].updated_at + 60
            did = [
                r.message.split(":")[0]
                for r in store.audit_log()
                if r.kind == "k8s_write" and r.message.startswith("did ")
            ]  # each attempt marks once and takes its own marker back: no reboot later
            assert did == [f"did mark_reboot {node}", f"did clear_reboot {node}"] * 2
            marks = sim.cluster.get("nodes", "", node)["metadata"]["annotations"]
            assert REBOOT_ANNOTATION not in marks
            (told,) = [r for r in store.audit_log() if r.kind == "needs_person"]
            assert told.target == f"node/{node}"
            assert "2 reboot_node attempts" in told.message
            assert "the last attempt: rolled_back: still executing after 120s" in told.message
        finally:
            store.close()
            act.close()


def test_a_reboot_that_finished_while_the_executor_was_away_is_done_not_timed_out(
    sim: Sim, actuator: KubeActuator, store: Store
) -> None:
    """The executor is not run for longer than `execute_timeout` (a busy leader, a late pass)
    while the node reboots and comes back: the next pass confirms the reboot and the action is
    done, not failed, rolled back and counted against the attempt budget (the stateful test's
    shrunk sequence: a lost GPU, nine diagnose steps, a late approval)."""
    loop = Loop(live_policy(rules("reboot_node", execute_timeout=120)), store, actuator, sim)
    node = "h100-0001"
    before = sim.cluster.get("nodes", "", node)["status"]["nodeInfo"]["bootID"]
    loop.cycle([finding(node, None, sim.cluster.clock())])
    (a,) = store.actions()
    assert a.state is ActionState.EXECUTING and a.progress == 1  # marked, awaiting the reboot
    sim.advance(300)  # the reboot (60 s) is long over, and so is the 120 s execute_timeout
    loop.runner.run(view(sim, actuator), sim.cluster.clock())
    (a,) = loop.run(10)
    assert a.state is ActionState.DONE, (a.state, a.result)
    assert "rebooted" in (a.result or "")
    after = sim.cluster.get("nodes", "", node)
    assert after["status"]["nodeInfo"]["bootID"] != before
    assert REBOOT_ANNOTATION not in after["metadata"]["annotations"]
    assert len(after["metadata"]["annotations"][REBOOTS_ANNOTATION].split(",")) == 1
    did = [
        r.message.split(":")[0]
        for r in store.audit_log()
        if r.kind == "k8s_write" and r.message.startswith("did ")
    ]
    assert did == [f"did mark_reboot {node}", f"did await_reboot {node}"]  # no clear_reboot


def test_an_approved_retry_whose_budget_is_spent_at_its_start_goes_to_a_person(
    sim: Sim, actuator: KubeActuator, store: Store
) -> None:
    """A retry waits for approval; meanwhile the attempt budget is spent (here the policy was
    tightened and the leader restarted). When the person approves, the executor's last look
    refuses the start: the action expires and a person is asked, in one `needs_person` row,
    exactly as when the journal escalates; the later cycles do not ask again."""
    policy = rules("reset_gpu")
    policy["rules"][0]["mode"] = "approval"
    policy["gates"] = {"attempts": {"cooldown": "60s", "max_attempts": 2}}
    loop = Loop(live_policy(policy), store, actuator, sim)
    f = finding(*FAILS, sim.cluster.clock())
    uuid = gpu_uuid("small", *FAILS)

    def approve(lp: Loop) -> None:
        now = sim.cluster.clock()
        for a in store.actions([ActionState.AWAITING_APPROVAL]):
            lp.journal.approve(a.id, "person", now)
        lp.runner.run(view(sim, actuator), now)

    loop.cycle([f])
    approve(loop)
    loop.run(60)  # the reset Job fails
    for _ in range(12):  # the cooldown passes; the retry is proposed and waits for a person
        sim.advance(10)
        loop.cycle([f])
    first, retry = sorted(store.actions(), key=lambda a: a.created_at)
    assert first.state is ActionState.FAILED
    assert retry.state is ActionState.AWAITING_APPROVAL and retry.attempt == 2
    assert not [r for r in store.audit_log() if r.kind == "needs_person"]

    policy["gates"] = {"attempts": {"cooldown": "60s", "max_attempts": 1}}
    loop = Loop(live_policy(policy), store, actuator, sim)
    approve(loop)
    got = store.get_action(retry.id)
    assert got is not None and got.state is ActionState.EXPIRED
    assert "1 reset_gpu attempts" in (got.result or ""), got.result
    assert len(jobs(sim)) == 1  # no second reset Job
    (told,) = [r for r in store.audit_log() if r.kind == "needs_person"]
    assert told.target == f"gpu/{uuid}" and told.action_id == retry.id
    assert "reset_gpu on gpu/" in told.message and "escalate to a person" in told.message
    assert "the last attempt: failed" in told.message
    assert told.detail["attempts"] == 1
    for _ in range(6):  # the journal's own escalation finds the person already asked
        sim.advance(10)
        loop.cycle([f])
    assert len([r for r in store.audit_log() if r.kind == "needs_person"]) == 1


def test_with_exponential_backoff_each_retry_of_a_failing_reset_waits_twice_as_long(
    sim: Sim, actuator: KubeActuator, store: Store
) -> None:
    """`backoff: exponential`: the retries of a reset Job that keeps failing start at least
    60 s, 120 s, then 200 s (the cap) after the previous failure, and then a person is told."""
    policy = rules("reset_gpu")
    policy["gates"] = {
        "attempts": {"cooldown": "60s", "max_attempts": 4, "backoff": "exponential",
                     "max_cooldown": "200s"}
    }  # fmt: skip
    loop = Loop(live_policy(policy), store, actuator, sim)
    f = finding(*FAILS, sim.cluster.clock())
    for _ in range(70):  # 700 s of cycles every 10 s: the fault persists throughout
        loop.cycle([f])
        sim.advance(10)
    acts = sorted(store.actions(), key=lambda a: a.created_at)
    assert [a.state for a in acts] == [ActionState.FAILED] * 4
    gaps = [(b.started_at or 0.0) - a.updated_at for a, b in pairwise(acts)]
    for gap, least in zip(gaps, (60, 120, 200), strict=True):
        assert least <= gap < least + 20, gaps  # the next 10 s cycle after the wait
    (told,) = [r for r in store.audit_log() if r.kind == "needs_person"]
    assert "4 reset_gpu attempts" in told.message
