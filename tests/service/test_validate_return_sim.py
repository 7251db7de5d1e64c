"""Validated return to service, against the simulator's Kubernetes API with the real client.

Two GPUs of the idle node h100-0003 are fenced by gpufleet's DeviceTaintRules (through the
journal and the real actuator). The simulator's diagnostics pass GPU 2 and fail GPU 5
(`gpu_diagnostics`), and a node-wide diagnostic on h100-0003 fails because GPU 5 does. Nothing
goes back without a journaled diagnostic that passed after gpufleet's latest change to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.k8s_sim import Sim, running_sim
from harness.live_policy import live_policy
from kube.actuator import KubeActuator
from kube.jobs import KubeNodeJobs, api_client
from remediations.cluster_names import fence_rule_name
from remediations.cycle import RemediationCycle
from remediations.playbooks import PLAYBOOKS, Subject
from remediations.scheduled.context import JobContext, JobRequest
from remediations.scheduled.diagnose import REPLACEMENT_LABEL, DiagnoseParams, run_diagnose
from remediations.scheduled.gated import execute, plan_for, propose
from remediations.store import ActionRecord
from remediations.types import ActionState, IncidentId
from remediations.validation import record_diagnosis
from simulator.layout import gpu_uuid

NODE = "h100-0003"
GOOD = gpu_uuid("small", NODE, 2)
BAD = gpu_uuid("small", NODE, 5)


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(tmp_path, gpu_diagnostics={f"{NODE}/5": "fail"}) as s:
        yield s


@pytest.fixture
def parts(sim: Sim, tmp_path: Path) -> Iterator[tuple[RemediationCycle, KubeNodeJobs]]:
    from remediations.store import Store

    store = Store.open(f"sqlite:///{tmp_path / 'v.db'}", cluster="small")
    actuator = KubeActuator.from_kubeconfig(sim.sa_kubeconfig, clock=sim.cluster.clock)
    loop = RemediationCycle(
        live_policy(), store, actuator, "svc-test", started_at=sim.cluster.clock() - 60
    )
    diag = KubeNodeJobs(api_client(sim.sa_kubeconfig))
    yield loop, diag
    diag.close()
    actuator.close()
    store.close()


def _subject(uuid: str, fault: int = 1) -> Subject:
    inc = IncidentId(f"inc-{uuid[-6:]}-{fault}")
    return Subject(inc, "gpu_xid", "critical", "XID 48", NODE, uuid)


def _propose(
    loop: RemediationCycle, sim: Sim, playbook: str, uuid: str, fault: int = 1
) -> tuple[ActionRecord | None, tuple[str, ...]]:
    now = sim.cluster.clock()
    view = loop.actuator.cluster_view(now)
    s = _subject(uuid, fault)
    plan = plan_for(playbook, s, view, PLAYBOOKS[playbook].params({}))
    assert not isinstance(plan, str), plan
    action, why = propose(
        loop, "test", s.incident_id, s.kind, now, plan, view, now, reasons=("test",)
    )
    if action is not None:
        execute(loop, [action.id], view, now)
    return action, why


def _fence(loop: RemediationCycle, sim: Sim, uuid: str, fault: int = 1) -> None:
    action, why = _propose(loop, sim, "fence_gpu", uuid, fault)
    assert action is not None, why
    assert loop.engine.store.get_action(action.id).state is ActionState.DONE  # type: ignore[union-attr]


def _holders(sim: Sim) -> dict[str, str]:
    """GPU UUID -> pod, as dcgm-exporter attributes them (what the service reads from its
    latest snapshot)."""
    return {
        gpu_uuid("small", p.node, i): p.key
        for p in sim.cluster.running_pods()
        if p.node is not None
        for i in p.gpu_indices
    }


def _diagnose(
    loop: RemediationCycle,
    diag: KubeNodeJobs,
    sim: Sim,
    lines: list[str] | None = None,
    hide: frozenset[str] = frozenset(),
    **params: object,
) -> dict[str, str]:
    def sleep(seconds: float) -> bool:
        sim.advance(60)
        return False

    ctx = JobContext(
        loop,
        clock=sim.cluster.clock,
        diagnostics=diag,
        sleep=sleep,
        gpu_holders=lambda: {g: k for g, k in _holders(sim).items() if g not in hide},
    )
    p = DiagnoseParams(wait=60, poll=0.01, max_nodes=4, **params)  # type: ignore[arg-type]
    out = run_diagnose(
        ctx, JobRequest("diag", "diagnose_and_return", 0.0, p, 0.0, sim.cluster.clock())
    )
    assert out.ok, out
    if lines is not None:
        lines.extend(out.details["nodes"])
    return dict(out.details["outcomes"])


def _rules(loop: RemediationCycle) -> dict[str, dict[str, str]]:
    act = loop.actuator
    assert isinstance(act, KubeActuator)
    return {r.name: dict(r.labels) for r in act.dra.our_rules()}


def test_unfence_without_a_passed_diagnostic_is_refused_and_journaled(
    sim: Sim, parts: tuple[RemediationCycle, KubeNodeJobs]
) -> None:
    loop, _ = parts
    _fence(loop, sim, GOOD)
    sim.advance(600)  # past the cooldown
    action, why = _propose(loop, sim, "unfence_gpu", GOOD)
    assert action is None
    assert any(w.startswith("validation:") and "no diagnostic has passed" in w for w in why), why
    assert fence_rule_name(GOOD) in _rules(loop)
    (denial,) = [r for r in loop.engine.store.audit_log() if r.message.endswith(": deny")]
    assert denial.target == f"gpu/{GOOD}" and denial.message.startswith("unfence_gpu")
    assert any("no diagnostic has passed" in r for r in denial.detail["reasons"])
    # a verdict from before the fence does not count either
    store = loop.engine.store
    record_diagnosis(store, sim.cluster.clock() - 3600, f"gpu/{GOOD}", "passed", node=NODE)
    action, why = _propose(loop, sim, "unfence_gpu", GOOD)
    assert action is None and any("predates it" in w for w in why), why


def test_passing_gpu_returns_failing_gpu_is_marked_and_a_person_told(
    sim: Sim, parts: tuple[RemediationCycle, KubeNodeJobs]
) -> None:
    loop, diag = parts
    for uuid in (GOOD, BAD):
        _fence(loop, sim, uuid)
    assert sim.cluster.controller.blocked() == {(NODE, 2), (NODE, 5)}
    sim.advance(600)
    outcomes = _diagnose(loop, diag, sim)
    assert outcomes == {f"gpu/{GOOD}": "passed", f"gpu/{BAD}": "failed"}
    jobs = sim.cluster.store.objects("jobs", "gpufleet-jobs")[1]
    commands = sorted(j["spec"]["template"]["spec"]["containers"][0]["command"] for j in jobs)
    assert commands == [
        ["dcgmi", "diag", "-r", "2", "-i", "2"],
        ["dcgmi", "diag", "-r", "2", "-i", "5"],
    ]
    assert {j["spec"]["template"]["spec"]["nodeName"] for j in jobs} == {NODE}

    # GPU 2 is back: its rule is gone and the scheduler may hand it out again
    rules = _rules(loop)
    assert fence_rule_name(GOOD) not in rules
    assert sim.cluster.controller.blocked() == {(NODE, 5)}
    # GPU 5 stays fenced (the rule and its NoSchedule effect), marked for replacement
    assert REPLACEMENT_LABEL in rules[fence_rule_name(BAD)]
    act = loop.actuator
    assert isinstance(act, KubeActuator)
    kept = act.device_taint_rule(fence_rule_name(BAD))
    assert kept is not None and kept.effect == "NoSchedule"
    log = loop.engine.store.audit_log()
    told = [r for r in log if r.kind == "needs_person"]
    assert [r.target for r in told] == [f"gpu/{BAD}"] and "dcgmi diag -r 2 -i 5" in told[0].message
    done = {a.playbook: a.state for a in loop.engine.store.actions() if a.rule == "schedule:diag"}
    assert done == {"unfence_gpu": ActionState.DONE, "mark_replacement": ActionState.DONE}

    # a re-run creates no Job and touches nothing: the marked GPU waits for a person
    assert _diagnose(loop, diag, sim) == {}
    assert len(sim.cluster.store.objects("jobs", "gpufleet-jobs")[1]) == 2


def test_a_change_after_the_verdict_needs_a_new_diagnostic(
    sim: Sim, parts: tuple[RemediationCycle, KubeNodeJobs]
) -> None:
    """A fence (or a reset, a reboot: any gpufleet action on the GPU or its node) after a
    passed diagnostic makes the GPU wait for a new one, run by a new Job."""
    loop, diag = parts
    _fence(loop, sim, GOOD)
    sim.advance(600)
    assert _diagnose(loop, diag, sim) == {f"gpu/{GOOD}": "passed"}
    assert fence_rule_name(GOOD) not in _rules(loop)
    sim.advance(3600)
    _fence(loop, sim, GOOD, fault=2)  # the GPU faults again
    sim.advance(600)
    action, why = _propose(loop, sim, "unfence_gpu", GOOD, fault=2)
    assert action is None and any("no diagnostic has passed since fence_gpu" in w for w in why)
    assert _diagnose(loop, diag, sim) == {f"gpu/{GOOD}": "passed"}
    assert len(sim.cluster.store.objects("jobs", "gpufleet-jobs")[1]) == 2  # a second Job


def test_a_node_returns_only_on_a_node_wide_pass(
    sim: Sim, parts: tuple[RemediationCycle, KubeNodeJobs]
) -> None:
    """The node path follows the same rule: h100-0003's node-wide diagnostic fails (its GPU 5
    does), so it stays quarantined; `uncordon` without a pass is refused."""
    loop, diag = parts
    now = sim.cluster.clock()
    view = loop.actuator.cluster_view(now)
    subject = Subject(IncidentId("inc-node"), "gpu_memory", "critical", "DBE", NODE)
    plan = plan_for("quarantine", subject, view, PLAYBOOKS["quarantine"].params({}))
    assert not isinstance(plan, str)
    action, why = propose(loop, "t", "inc-node", "gpu_memory", now, plan, view, now, reasons=("t",))
    assert action is not None, why
    execute(loop, [action.id], view, now)
    sim.advance(600)
    now = sim.cluster.clock()
    view = loop.actuator.cluster_view(now)
    back = plan_for("uncordon", subject, view, PLAYBOOKS["uncordon"].params({}))
    assert not isinstance(back, str)
    refused, why = propose(
        loop, "t", "inc-node", "gpu_memory", now, back, view, now, reasons=("t",)
    )
    assert refused is None and any(w.startswith("validation:") for w in why), why
    assert _diagnose(loop, diag, sim, gpus=False) == {f"node/{NODE}": "failed"}
    node = sim.cluster.get("nodes", "", NODE)
    assert node["spec"]["unschedulable"] is True
    assert REPLACEMENT_LABEL in node["metadata"]["labels"]


def test_a_persons_journaled_waiver_returns_a_gpu_whose_diagnostic_cannot_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """3 a.m., the DCGM image is broken: a person vouches with `gpufleet diagnostics waive`
    (name and reason journaled); the next run returns the GPU through the gates, no Job."""
    from gpufleet.cli import main
    from remediations.store import Store

    # scenario time well before the wall clock, so the waiver (wall time) follows the fence
    with running_sim(tmp_path, start=1_700_000_000, gpu_diagnostics={f"{NODE}/5": "fail"}) as sim:
        url = f"sqlite:///{tmp_path / 'w.db'}"
        store = Store.open(url, cluster="small")
        actuator = KubeActuator.from_kubeconfig(sim.sa_kubeconfig, clock=sim.cluster.clock)
        loop = RemediationCycle(
            live_policy(), store, actuator, "svc", started_at=sim.cluster.clock() - 60
        )
        diag = KubeNodeJobs(api_client(sim.sa_kubeconfig))
        try:
            _fence(loop, sim, BAD)
            sim.advance(600)
            cfg = tmp_path / "gpufleet.yaml"
            cfg.write_text(f"store_url: '{url}'\ncluster: small\n")
            waive = ["diagnostics", "waive", f"gpu/{BAD}", "--node", NODE, "--by", "erin"]
            assert main([*waive, "--reason", " ", "--config", str(cfg)]) == 2
            assert (
                main([*waive, "--reason", "diag image broken; burn-in ok", "--config", str(cfg)])
                == 0
            )
            assert _diagnose(loop, diag, sim) == {}  # no Job: the waiver is the verdict
            assert sim.cluster.store.objects("jobs", "gpufleet-jobs")[1] == []
            assert fence_rule_name(BAD) not in _rules(loop)
            (back,) = [a for a in store.actions() if a.playbook == "unfence_gpu"]
            assert back.state is ActionState.DONE and "waived" in back.reasons[0]
            capsys.readouterr()
            assert main(["diagnostics", "list", f"gpu/{BAD}", "--config", str(cfg)]) == 0
            assert "waived  erin" in capsys.readouterr().out
        finally:
            diag.close()
            actuator.close()
            store.close()


def test_a_policy_rule_that_unfences_is_stopped_by_the_executor(
    sim: Sim, parts: tuple[RemediationCycle, KubeNodeJobs]
) -> None:
    """Whatever path journals a return (here a policy rule, auto mode), the executor re-checks
    validation at the moment of acting: the approved action expires with the reason."""
    from detectors.findings import Finding, FindingKind, Severity
    from remediations.decision_journal import DecisionJournal
    from remediations.executor import Executor
    from tests.remediations.helpers import live_policy as rule_policy

    loop, _ = parts
    _fence(loop, sim, GOOD)
    sim.advance(600)
    now = sim.cluster.clock()
    policy = rule_policy(
        {
            "hysteresis": {"open_after": 1},
            "rules": [{"name": "back", "match": {"kinds": ["gpu_xid"]},
                       "playbook": "unfence_gpu", "mode": "auto"}],
        }
    )  # fmt: skip
    store = loop.engine.store
    eng = DecisionJournal(policy, store, started_at=now - 60)
    f = Finding(FindingKind.GPU_XID, Severity.CRITICAL, "XID 48", now, now, NODE, GOOD)
    eng.cycle([f], loop.actuator.cluster_view(now), now)
    (a,) = [x for x in store.actions() if x.playbook == "unfence_gpu"]
    assert a.state is ActionState.APPROVED
    Executor(policy, store, loop.actuator, "t", open_incidents=eng.open_incident_ids).run(
        loop.actuator.cluster_view(now), now
    )
    after = store.get_action(a.id)
    assert after is not None and after.state is ActionState.EXPIRED
    assert after.result.startswith("validation: ") and "no diagnostic has passed" in after.result
    assert fence_rule_name(GOOD) in _rules(loop)


def test_a_repair_after_the_replacement_mark_earns_a_new_diagnostic(
    sim: Sim, parts: tuple[RemediationCycle, KubeNodeJobs]
) -> None:
    """Any gpufleet action on the GPU or its node after the mark (here `request_reset`; the
    same for a reset or reboot playbook) re-arms the diagnostic: while it is in flight the GPU
    waits, once done a new Job runs, and a pass returns the GPU."""
    loop, diag = parts
    _fence(loop, sim, BAD)
    sim.advance(600)
    assert _diagnose(loop, diag, sim) == {f"gpu/{BAD}": "failed"}
    assert _diagnose(loop, diag, sim) == {}  # marked: a person's (or a repair's) turn
    sim.advance(600)
    now = sim.cluster.clock()
    view = loop.actuator.cluster_view(now)
    s = _subject(BAD)
    plan = plan_for("request_reset", s, view, PLAYBOOKS["request_reset"].params({}))
    assert not isinstance(plan, str), plan
    action, why = propose(loop, "t", s.incident_id, s.kind, now, plan, view, now, reasons=("t",))
    assert action is not None, why
    assert _diagnose(loop, diag, sim) == {}  # approved, not carried out yet: the GPU waits
    execute(loop, [action.id], view, now)
    sim.cluster.scenario.gpu_diagnostics.clear()  # the reset fixed it
    sim.advance(600)
    assert _diagnose(loop, diag, sim) == {f"gpu/{BAD}": "passed"}
    assert fence_rule_name(BAD) not in _rules(loop)
    assert len(sim.cluster.store.objects("jobs", "gpufleet-jobs")[1]) == 2


def test_a_repair_in_flight_holds_the_diagnostic(
    sim: Sim, parts: tuple[RemediationCycle, KubeNodeJobs]
) -> None:
    loop, diag = parts
    _fence(loop, sim, GOOD)
    sim.advance(600)
    now = sim.cluster.clock()
    view = loop.actuator.cluster_view(now)
    s = _subject(GOOD)
    plan = plan_for("request_reset", s, view, PLAYBOOKS["request_reset"].params({}))
    assert not isinstance(plan, str), plan
    action, why = propose(loop, "t", s.incident_id, s.kind, now, plan, view, now, reasons=("t",))
    assert action is not None, why  # approved, not carried out yet
    lines: list[str] = []
    assert _diagnose(loop, diag, sim, lines) == {}
    assert f"gpu/{GOOD}: waits for request_reset (action {action.id}" in " ".join(lines), lines
    assert sim.cluster.store.objects("jobs", "gpufleet-jobs")[1] == []


def test_a_gpu_a_pod_still_holds_is_not_diagnosed(
    sim: Sim, parts: tuple[RemediationCycle, KubeNodeJobs]
) -> None:
    """NoSchedule leaves the running pod on the fenced GPU: the diagnostic waits for it, whether
    the exporter or only the pod's ResourceClaim says it holds the GPU."""
    loop, diag = parts
    sim.advance(60)  # the workloads start
    held = gpu_uuid("small", "h100-0000", 2)
    holder = _holders(sim)[held]
    now = sim.cluster.clock()
    view = loop.actuator.cluster_view(now)
    s = Subject(IncidentId("inc-held"), "gpu_xid", "critical", "XID 48", "h100-0000", held)
    plan = plan_for("fence_gpu", s, view, PLAYBOOKS["fence_gpu"].params({}))
    assert not isinstance(plan, str)
    action, why = propose(loop, "t", s.incident_id, s.kind, now, plan, view, now, reasons=("t",))
    assert action is not None, why
    execute(loop, [action.id], view, now)
    sim.advance(600)
    lines: list[str] = []
    assert _diagnose(loop, diag, sim, lines) == {}
    assert f"h100-0000 GPU 2: waits for {holder} to release it" in lines, lines
    assert sim.cluster.store.objects("jobs", "gpufleet-jobs")[1] == []
    lines.clear()  # the exporter attributes it to no pod (no DRA support): the claim still does
    assert _diagnose(loop, diag, sim, lines, hide=frozenset({held})) == {}
    assert f"h100-0000 GPU 2: waits for {holder} (ResourceClaim) to release it" in lines, lines
    assert sim.cluster.store.objects("jobs", "gpufleet-jobs")[1] == []
    act = loop.actuator
    assert isinstance(act, KubeActuator)
    assert [g.held_by for g in act.fenced_gpus()] == [(holder,)]
    sim.api.faults.add("/resourceclaims$", status=404)  # no claims API: the exporter alone
    assert [g.held_by for g in act.fenced_gpus()] == [()]


def test_an_outcome_from_before_a_change_made_while_the_job_ran_is_ignored(
    sim: Sim, parts: tuple[RemediationCycle, KubeNodeJobs]
) -> None:
    loop, diag = parts
    _fence(loop, sim, GOOD)
    sim.advance(600)
    repaired: list[str] = []

    def sleep(seconds: float) -> bool:
        if not repaired:  # a reset is carried out while the diagnostic runs
            now = sim.cluster.clock()
            view = loop.actuator.cluster_view(now)
            s = _subject(GOOD)
            plan = plan_for("request_reset", s, view, PLAYBOOKS["request_reset"].params({}))
            assert not isinstance(plan, str)
            a, why = propose(loop, "t", s.incident_id, s.kind, now, plan, view, now, reasons=("t",))
            assert a is not None, why
            execute(loop, [a.id], view, now)
            repaired.append(a.id)
        sim.advance(60)
        return False

    ctx = JobContext(loop, clock=sim.cluster.clock, diagnostics=diag, sleep=sleep,
                     gpu_holders=lambda: _holders(sim))  # fmt: skip
    p = DiagnoseParams(wait=60, poll=0.01)
    out = run_diagnose(ctx, JobRequest("d", "diagnose_and_return", 0.0, p, 0.0, 0.0))
    assert repaired and out.details["outcomes"] == {}
    assert f"gpu/{GOOD}: passed ignored, changed meanwhile" in out.details["nodes"]
    assert not [r for r in loop.engine.store.audit_log() if r.kind == "diagnostic"]
    assert fence_rule_name(GOOD) in _rules(loop)
    assert _diagnose(loop, diag, sim) == {f"gpu/{GOOD}": "passed"}  # a new Job, after the reset
    assert len(sim.cluster.store.objects("jobs", "gpufleet-jobs")[1]) == 2
