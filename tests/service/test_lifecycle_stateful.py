"""The remediation lifecycle as a state machine: random event sequences, invariants every step.

Hypothesis drives the real decision journal, gates, executor, playbooks, the hold reconciler and
the scheduled `diagnose_and_return` against the simulator's Kubernetes API (the real
`kubernetes` client) with random sequences of: a GPU fault (a double-bit ECC error: quarantine
and an approved drain; an XID 48: quarantine and a GPU reset Job; a GPU fallen off the bus: a
node reboot) appearing, persisting, clearing, or coming back after a repair on two nodes;
detection cycles; reset Jobs that fail, reboots that never come back (the action times out);
approvals of what waits for a person, prompt or late; diagnostics that pass, fail (the fault
persists, or the hardware fails it) or flake; the leader restarting (a new process on the same
journal); a person cordoning a node by hand. After every step it checks:

1. nothing is returned by gpufleet while its fault persists or an open warning or critical
   hardware incident remains on it, nor without a diagnostic (passed or waived) after
   gpufleet's latest change to it (read from the raw journal, not through the return rule);
2. nothing gpufleet holds is out of service without an owner (open incident, pending action, a
   person's task) and an explanation (the owner's reason, and the journaled action its marker
   names), or the reconciler has reported it as an orphan;
3. no write happens twice (no action writes more steps than its plan has);
4. (at the end) once every fault has cleared and diagnostics pass, nothing gpufleet took stays
   held beyond the return delay, except what a failed diagnostic marked for a person;
5. nothing a person cordoned is uncordoned by gpufleet;
6. a failed repair (reset, reboot) is tried at most `max_attempts` times per target in the
   window; once that budget is spent, the next cycle with its incident still open has asked a
   person exactly once (one `needs_person` row per incident and playbook).

CI runs a fixed budget (`GPUFLEET_STATEFUL_EXAMPLES`, default 4 sequences of up to 10 steps,
derandomized so CI runs the same sequences every time, each starting with a fault found), and
one fixed sequence through the same machine (a reset that keeps failing, a reboot that never
comes back) so the retry budget's invariant is exercised whatever the draw;
`make bench` runs it longer (bench/stateful_lifecycle.py). Bugs it found: a node a person
cordoned and gpufleet then quarantined was never given back (the ownership gate refused the
whole return, so gpufleet's taint and label stayed); test_return_rule_sim.py pins the fix. A
reboot that finished while no executor pass ran was timed out, rolled back and counted against
the budget (the executor checked `execute_timeout` before completion); the shrunk sequence is a
fixed example below, and test_repair_sim.py pins the fix.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from detectors.findings import Finding, FindingKind, Severity
from harness.k8s_sim import Sim, running_sim
from harness.live_policy import QUARANTINE_CRITICAL, live_policy_dict
from kube.actuator import KubeActuator
from kube.jobs import KubeNodeJobs, api_client
from remediations.cycle import RemediationCycle
from remediations.holds import ORPHAN, holds, owner
from remediations.policy import Policy, policy_from_dict
from remediations.scheduled.context import JobContext, JobRequest
from remediations.scheduled.diagnose import REPLACEMENT_LABEL, DiagnoseParams, run_diagnose
from remediations.store import Store
from remediations.types import ACTION_ANNOTATION, ActionState
from remediations.validation import DIAGNOSTIC, NEEDS_PERSON, RETURN_PLAYBOOKS, scope
from simulator.layout import gpu_uuid
from simulator.scenario import DiagResult

NODES = ("h100-0001", "h100-0003")
EXAMPLES = int(os.environ.get("GPUFLEET_STATEFUL_EXAMPLES", "4"))
STEPS = int(os.environ.get("GPUFLEET_STATEFUL_STEPS", "10"))
QUIET = 60.0
HARDWARE = ("gpu_xid", "gpu_memory", "gpu_lost", "gpu_interconnect")
SERIOUS = ("warning", "critical")
GPU = 2
"""The faulty GPU's index on either node."""
KINDS = {
    "dbe": FindingKind.GPU_MEMORY,  # quarantine, and a drain a person approves
    "xid": FindingKind.GPU_XID,  # quarantine, and a GPU reset Job
    "lost": FindingKind.GPU_LOST,  # a node reboot
}
REPAIRS = ("reset_gpu", "reboot_node")
MAX_ATTEMPTS = 2
WINDOW = 86400.0


def _policy() -> Policy:
    drain = {
        "name": "drain-critical",
        "match": {"kinds": ["gpu_memory"], "severities": ["critical"]},
        "playbook": "drain",
        "mode": "approval",
    }
    reset = {
        "name": "reset-xid",
        "match": {"kinds": ["gpu_xid"], "severities": ["critical"]},
        "playbook": "reset_gpu",
        "mode": "auto",
        "params": {"verify_timeout": "120s"},
    }
    reboot = {
        "name": "reboot-lost",
        "match": {"kinds": ["gpu_lost"], "severities": ["critical"]},
        "playbook": "reboot_node",
        "mode": "auto",
        "params": {"execute_timeout": "120s", "max_reboots": 10},
    }
    p = live_policy_dict([QUARANTINE_CRITICAL, drain, reset, reboot])
    p["gates"] = {
        **p["gates"],
        "return_quiet": f"{QUIET:.0f}s",
        "attempts": {"cooldown": "1m", "max_attempts": MAX_ATTEMPTS, "window": f"{WINDOW:.0f}s"},
    }
    p["hysteresis"] = {"open_after": 1, "resolve_after": 2}
    return policy_from_dict(p, "stateful-policy")


class World:
    """What lives across Hypothesis examples: the simulation and its API clients."""

    def __init__(self, sim: Sim, tmp: Path) -> None:
        self.sim, self.tmp = sim, tmp
        self.pristine = {n: sim.cluster.get("nodes", "", n) for n in NODES}
        self.examples = 0
        self.steps = 0
        self.seen: dict[str, int] = {}
        """`playbook:state` of every action the sequences journaled, and `needs_person`."""


class Lifecycle(RuleBasedStateMachine):
    world: World

    def __init__(self) -> None:
        super().__init__()
        w = self.world
        w.examples += 1
        self.sim = w.sim
        for name, node in w.pristine.items():  # every sequence starts from a clean fleet
            now = self.sim.cluster.get("nodes", "", name)
            self.sim.cluster.write("nodes", {**now, "spec": node["spec"], "metadata": {
                **now["metadata"], "labels": node["metadata"].get("labels", {}),
                "annotations": node["metadata"].get("annotations", {})}})  # fmt: skip
        self.store = Store.open(f"sqlite:///{w.tmp / f'j{w.examples}.db'}", cluster="small")
        self.actuator = KubeActuator.from_kubeconfig(
            self.sim.kubeconfig, clock=self.sim.cluster.clock
        )
        self.jobs = KubeNodeJobs(api_client(self.sim.kubeconfig))
        self.policy = _policy()
        self.leader = 0
        self.loop = self._start()
        repairs = self.sim.cluster.repairs
        for n in list(repairs.rebooting):  # a reboot the last sequence hung comes back now
            repairs.rebooting[n] = self.sim.cluster.clock()
        self.sim.cluster.scenario.reset_failures.clear()
        self.fault: dict[str, tuple[float, str] | None] = dict.fromkeys(NODES)
        """Node -> (when its fault appeared, its kind) (None: healthy)."""
        self.repaired: set[str] = set()
        """Nodes a repair or a return has touched (where a fault may come back)."""
        self.history: list[tuple[float, str, bool]] = []
        self.flaky: set[str] = set()
        self.failing: set[str] = set()
        self.by_hand: set[str] = set()

    def _start(self) -> RemediationCycle:
        self.leader += 1
        return RemediationCycle(
            self.policy, self.store, self.actuator, f"svc-{self.leader}",
            started_at=self.sim.cluster.clock() - 60,
        )  # fmt: skip

    def teardown(self) -> None:
        try:
            self._settle()
        finally:
            seen = self.world.seen
            for a in self.store.actions():
                key = f"{a.playbook}:{a.state.value}"
                seen[key] = seen.get(key, 0) + 1
            asked = [r for r in self.store.audit_log() if r.kind == NEEDS_PERSON]
            seen[NEEDS_PERSON] = seen.get(NEEDS_PERSON, 0) + len(asked)
            self.jobs.close()
            self.actuator.close()
            self.store.close()

    # ---- events ------------------------------------------------------------------------------

    @initialize(
        node=st.sampled_from(NODES),
        kind=st.sampled_from(sorted(KINDS)),
        repairs_fail=st.booleans(),
    )
    def first_fault(self, node: str, kind: str, repairs_fail: bool) -> None:
        """Every sequence starts with a fault found (so its few steps exercise the lifecycle),
        on hardware that a reset may not fix."""
        self.reset_job_fails(node, repairs_fail)
        self.fault_appears(node, kind)
        self.cycle(30)

    @rule(node=st.sampled_from(NODES), kind=st.sampled_from(sorted(KINDS)))
    def fault_appears(self, node: str, kind: str) -> None:
        if self.fault[node] is None:
            self.fault[node] = (self.sim.cluster.clock(), kind)
            self.history.append((self.sim.cluster.clock(), node, True))

    @rule(node=st.sampled_from(NODES), kind=st.sampled_from(sorted(KINDS)))
    def fault_returns_after_repair(self, node: str, kind: str) -> None:
        """A repeat: the fault comes back on a node gpufleet repaired or returned."""
        if node in self.repaired:
            self.fault_appears(node, kind)

    @rule(node=st.sampled_from(NODES), fails=st.booleans())
    def reset_job_fails(self, node: str, fails: bool) -> None:
        """From now on the node's reset Jobs fail (the GPU does not come back), or work."""
        failing = self.sim.cluster.scenario.reset_failures
        key = f"{node}/{GPU}"
        if fails and key not in failing:
            failing.append(key)
        elif not fails and key in failing:
            failing.remove(key)

    @rule(node=st.sampled_from(NODES))
    def reboot_hangs(self, node: str) -> None:
        """A node that is rebooting never comes back (until the next sequence)."""
        rebooting = self.sim.cluster.repairs.rebooting
        if node in rebooting:
            rebooting[node] = self.sim.cluster.clock() + 1e6

    @rule(node=st.sampled_from(NODES))
    def diagnostic_fails(self, node: str) -> None:
        """The hardware fails its next diagnostic although no fault is reported."""
        self.failing.add(node)

    @rule(node=st.sampled_from(NODES))
    def fault_clears(self, node: str) -> None:
        if self.fault[node] is not None:
            self.fault[node] = None
            self.history.append((self.sim.cluster.clock(), node, False))

    @rule(seconds=st.sampled_from([10, 30, 90]))
    def cycle(self, seconds: int) -> None:
        self.sim.advance(seconds)
        self._cycle()
        self._owned()
        self._asked_once_budget_spent()

    @rule(node=st.sampled_from(NODES))
    def diagnostic_flakes(self, node: str) -> None:
        self.flaky.add(node)

    @rule()
    def diagnose(self) -> None:
        self._diagnose()

    @rule(late=st.booleans())
    def approve(self, late: bool) -> None:
        if late:
            self.sim.advance(300)
        for a in self.store.actions([ActionState.AWAITING_APPROVAL]):
            self.loop.engine.approve(a.id, "person", self.sim.cluster.clock())
        self.loop.act(self.sim.cluster.clock())

    @rule()
    def leader_restarts(self) -> None:
        self.loop.close()
        self.loop = self._start()

    @rule(node=st.sampled_from(NODES))
    def person_cordons(self, node: str) -> None:
        n = self.sim.cluster.get("nodes", "", node)
        held = any(k.startswith("gpufleet.io/") for k in n["metadata"].get("annotations") or {})
        if n["spec"].get("unschedulable") or held or node in self.by_hand:
            return
        self.sim.cluster.write("nodes", {**n, "spec": {**n["spec"], "unschedulable": True}})
        self.by_hand.add(node)

    # ---- invariants --------------------------------------------------------------------------

    @invariant()
    def counted(self) -> None:
        self.world.steps += 1

    @invariant()
    def never_returned_while_faulty(self) -> None:
        for a in self.store.actions([ActionState.DONE]):
            if a.playbook not in RETURN_PLAYBOOKS or a.started_at is None:
                continue
            node, at = a.target_nodes[0], a.started_at
            assert not self._faulty_at(node, at), f"{node} returned at {at} with its fault on"
            for i in self.store.incidents_on(node):
                if i.kind in HARDWARE and i.severity in SERIOUS and i.opened_at <= at:
                    assert i.resolved_at is not None and i.resolved_at <= at, (
                        f"{a.target} returned at {at} while incident {i.id} ({i.kind}) was open"
                    )
            self._diagnosed_since_change(a.target, node, at)

    @invariant()
    def repairs_within_budget(self) -> None:
        tried: dict[tuple[str, str], list[float]] = {}
        for a in self.store.actions():
            if a.playbook in REPAIRS and a.started_at is not None:
                tried.setdefault((a.playbook, a.target), []).append(a.started_at)
        for (playbook, target), starts in tried.items():
            starts.sort()
            for i, t in enumerate(starts):
                within = [s for s in starts[: i + 1] if t - s < WINDOW]
                assert len(within) <= MAX_ATTEMPTS, f"{playbook} on {target}: {starts}"
        asked: dict[tuple[str | None, object], int] = {}
        for r in self.store.audit_log():
            if r.kind == NEEDS_PERSON and r.detail.get("playbook") in REPAIRS:
                key = (r.incident_id, r.detail.get("playbook"))
                asked[key] = asked.get(key, 0) + 1
        assert all(n == 1 for n in asked.values()), asked

    @invariant()
    def held_with_owner_and_explanation(self) -> None:
        view = self.actuator.cluster_view(self.sim.cluster.clock())
        reported = {r.target for r in self.store.audit_log() if r.kind == ORPHAN}
        for h in holds(view):
            node = view.nodes[h.node]
            took = node.annotations.get(ACTION_ANNOTATION, "")
            assert took and self.store.get_action(took) is not None, (
                f"{h.subject} is held but names no journaled action ({took!r})"
            )
            if h.subject not in reported:
                why = owner(self.store, h)
                assert why, f"{h.subject} is held with no owner and no explanation"

    @invariant()
    def no_write_twice(self) -> None:
        did: dict[str, int] = {}
        for r in self.store.audit_log():
            if r.kind == "k8s_write" and r.action_id and r.message.startswith("did "):
                did[r.action_id] = did.get(r.action_id, 0) + 1
        for a in self.store.actions():
            assert did.get(a.id, 0) <= len(a.plan), f"{a.playbook} {a.id} wrote twice"

    @invariant()
    def hand_cordons_stay(self) -> None:
        for node in self.by_hand:
            n = self.sim.cluster.get("nodes", "", node)
            assert n["spec"].get("unschedulable") is True, f"gpufleet uncordoned {node}"

    # ---- helpers -----------------------------------------------------------------------------

    def _diagnosed_since_change(self, target: str, node: str, at: float) -> None:
        """A diagnostic passed (or a person waived it) after gpufleet's latest change to the
        target, and before the return at `at`."""
        targets = scope(target, node)
        changes = [
            a.started_at
            for t in targets
            for a in self.store.actions(target=t)
            if a.started_at is not None and a.started_at < at
            and a.playbook not in RETURN_PLAYBOOKS and a.playbook != "mark_replacement"
        ]  # fmt: skip
        rows = [r for r in self.store.audit_of(DIAGNOSTIC, targets) if r.at <= at]
        assert rows, f"{target} returned at {at} without any diagnostic"
        latest = max(rows, key=lambda r: (r.at, r.id))
        assert latest.detail.get("outcome") in ("passed", "waived"), (
            f"{target} returned at {at} after a {latest.detail.get('outcome')} diagnostic"
        )
        assert not changes or latest.at > max(changes), (
            f"{target} returned at {at}: its diagnostic at {latest.at} predates gpufleet's "
            f"change at {max(changes)}"
        )

    def _asked_once_budget_spent(self) -> None:
        """After a cycle: an open incident whose repair has failed `MAX_ATTEMPTS` times (all
        ended before this cycle) has asked a person, once."""
        now = self.sim.cluster.clock()
        ended = (ActionState.FAILED, ActionState.ROLLED_BACK)
        for node in NODES:
            for i in self.store.incidents_on(node):
                if i.resolved_at is not None:
                    continue
                for playbook in REPAIRS:
                    mine = [a for a in self.store.actions()
                            if a.incident_id == i.id and a.playbook == playbook]  # fmt: skip
                    if not mine:
                        continue
                    target = mine[0].target
                    tried = [
                        a for a in self.store.actions(target=target)
                        if a.playbook == playbook and a.started_at is not None
                        and now - a.started_at < WINDOW
                    ]  # fmt: skip
                    spent = len(tried) >= MAX_ATTEMPTS and all(
                        a.state in ended and a.updated_at < now for a in tried
                    )
                    if not spent:
                        continue
                    asked = [
                        r for r in self.store.audit_of(NEEDS_PERSON, [target])
                        if r.incident_id == i.id and r.detail.get("playbook") == playbook
                    ]  # fmt: skip
                    assert len(asked) == 1, (
                        f"{playbook} on {target} failed {len(tried)} times; incident {i.id} "
                        f"asked a person {len(asked)} times"
                    )

    def _faulty_at(self, node: str, t: float) -> bool:
        on = False
        for at, n, state in self.history:
            if n == node and at <= t:
                on = state
        return on

    def _cycle(self) -> None:
        now = self.sim.cluster.clock()
        findings = [
            Finding(
                KINDS[f[1]],
                Severity.CRITICAL,
                f"{f[1]} on GPU {GPU} of {n}",
                f[0],
                now,
                node=n,
                gpu_uuid=gpu_uuid("small", n, GPU),
                detector=KINDS[f[1]].value,
            )
            for n, f in self.fault.items()
            if f is not None
        ]
        self.loop.tick(findings, now, self.actuator.cluster_view(now))
        for a in self.store.actions([ActionState.DONE]):
            node = a.target_nodes[0] if a.target_nodes else ""
            if node in self.fault and (a.playbook in REPAIRS or a.playbook in RETURN_PLAYBOOKS):
                self.repaired.add(node)

    def _owned(self) -> None:
        view = self.actuator.cluster_view(self.sim.cluster.clock())
        reported = {r.target for r in self.store.audit_log() if r.kind == ORPHAN}
        for h in holds(view):
            assert owner(self.store, h) is not None or h.subject in reported, h

    def _diagnose(self) -> None:
        diags = self.sim.cluster.scenario.diagnostics
        for n in NODES:  # the simulated dcgmi diag: fails while the fault persists, or flakes
            bad = self.fault[n] is not None or n in self.flaky or n in self.failing
            diags[n] = DiagResult.FAIL if bad else DiagResult.PASS
        self.flaky.clear()
        self.failing.clear()

        def sleep(seconds: float) -> bool:
            self.sim.advance(30)
            return False

        ctx = JobContext(self.loop, clock=self.sim.cluster.clock, diagnostics=self.jobs,
                         sleep=sleep)  # fmt: skip
        p = DiagnoseParams(wait=90, poll=0.01, require_idle=False)
        now = self.sim.cluster.clock()
        out = run_diagnose(ctx, JobRequest("diag", "diagnose_and_return", 0.0, p, 0.0, now))
        assert out.ok, out

    def _settle(self) -> None:
        """Invariant 4: every fault clears, cycles resolve the incidents, diagnostics pass;
        after the return delay nothing gpufleet took is still held, unless it is marked for
        replacement (a failed diagnostic: a person's turn)."""
        for n in NODES:
            self.fault_clears(n)
        self.flaky.clear()
        self.failing.clear()
        for _ in range(3):
            self.sim.advance(30)
            self._cycle()
        for _ in range(3):
            self._diagnose()
            self.sim.advance(QUIET)
            self._cycle()
        view = self.actuator.cluster_view(self.sim.cluster.clock())
        for h in holds(view):
            node = view.nodes[h.node]
            assert REPLACEMENT_LABEL in node.labels, (
                f"{h.subject} still held after its fault cleared and diagnostics passed "
                f"(owner: {owner(self.store, h)})"
            )


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(tmp_path, diagnostic_seconds=60, reboot_seconds=60) as s:
        yield s


def run(sim: Sim, tmp: Path, examples: int, steps: int) -> World:
    """Run the machine; returns the world with the examples and steps it ran."""
    world = World(sim, tmp)
    machine: Any = type("BoundLifecycle", (Lifecycle,), {"world": world})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        ),
    )
    return world


def test_lifecycle_invariants_hold_under_random_event_sequences(sim: Sim, tmp_path: Path) -> None:
    world = run(sim, tmp_path, EXAMPLES, STEPS)
    print(f"stateful: {world.examples} examples, {world.steps} steps")
    print("stateful: journaled " + ", ".join(f"{k} {v}" for k, v in sorted(world.seen.items())))
    assert world.examples >= EXAMPLES and world.steps > EXAMPLES


def test_the_machine_checks_a_failing_reset_and_a_hung_reboot(sim: Sim, tmp_path: Path) -> None:
    """One fixed sequence through the same machine and invariants, so CI always covers the
    retry budget whatever the random sequences draw: a GPU whose reset Jobs keep failing, and
    a node whose reboots never come back, are each tried `MAX_ATTEMPTS` times and then a
    person is asked once."""
    world = World(sim, tmp_path)
    machine = type("BoundLifecycle", (Lifecycle,), {"world": world})()

    def step() -> None:
        machine.cycle(30)
        machine.never_returned_while_faulty()
        machine.repairs_within_budget()
        machine.held_with_owner_and_explanation()
        machine.no_write_twice()
        rebooting = sim.cluster.repairs.rebooting
        if "h100-0001" in rebooting:
            machine.reboot_hangs("h100-0001")

    machine.first_fault("h100-0003", "xid", True)
    machine.fault_appears("h100-0001", "lost")
    for _ in range(24):
        step()
    acts = sorted(machine.store.actions(), key=lambda a: a.created_at)
    tried = [(a.playbook, a.state.value) for a in acts if a.playbook in REPAIRS]
    assert sorted(tried) == [("reboot_node", "rolled_back")] * 2 + [("reset_gpu", "failed")] * 2
    asked = [r for r in machine.store.audit_log() if r.kind == NEEDS_PERSON]
    assert sorted(str(r.detail["playbook"]) for r in asked) == ["reboot_node", "reset_gpu"]
    machine.teardown()


def test_a_reboot_done_before_a_late_pass_is_not_timed_out(sim: Sim, tmp_path: Path) -> None:
    """The sequence this machine shrank to (a bug it found): a lost GPU starts a reboot, nine
    diagnose steps pass without an executor pass while the node reboots and comes back, then a
    late approval runs the executor past `execute_timeout`. The reboot is confirmed done, not
    failed, rolled back and counted against the attempt budget."""
    world = World(sim, tmp_path)
    machine = type("BoundLifecycle", (Lifecycle,), {"world": world})()

    def check() -> None:
        machine.never_returned_while_faulty()
        machine.repairs_within_budget()
        machine.held_with_owner_and_explanation()
        machine.no_write_twice()

    machine.first_fault("h100-0001", "lost", False)
    check()
    for _ in range(9):
        machine.diagnose()
        check()
    machine.approve(late=True)
    check()
    reboots = [a for a in machine.store.actions() if a.playbook == "reboot_node"]
    assert [(a.attempt, a.state) for a in reboots] == [(1, ActionState.DONE)], [
        (a.attempt, a.state, a.result) for a in reboots
    ]
    machine.teardown()
