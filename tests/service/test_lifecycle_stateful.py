"""The remediation lifecycle as a state machine: random event sequences, invariants every step.

Hypothesis drives the real decision journal, gates, executor, playbooks, the hold reconciler and
the scheduled `diagnose_and_return` against the simulator's Kubernetes API (the real
`kubernetes` client) with random sequences of: a GPU fault appearing, persisting or clearing on
two nodes; detection cycles; approvals of what waits for a person, prompt or late; diagnostics
that pass, fail (the fault persists) or flake; the leader restarting (a new process on the same
journal); a person cordoning a node by hand. After every step it checks:

1. no node with an open hardware incident, or whose fault persists, is returned by gpufleet;
2. every node gpufleet holds has an owner (open incident, pending action, a person's task), or
   the reconciler has reported it as an orphan (checked after each cycle, when it has run);
3. no write happens twice (no action writes more steps than its plan has);
4. (at the end) once every fault has cleared and diagnostics pass, nothing gpufleet took stays
   held beyond the return delay, except what a failed diagnostic marked for a person;
5. nothing a person cordoned is uncordoned by gpufleet.

CI runs a fixed budget (`GPUFLEET_STATEFUL_EXAMPLES`, default 4 sequences of up to 10 steps,
derandomized so CI runs the same sequences every time);
`make bench` runs it longer (bench/stateful_lifecycle.py). Bugs it found: a node a person
cordoned and gpufleet then quarantined was never given back (the ownership gate refused the
whole return, so gpufleet's taint and label stayed); test_return_rule_sim.py pins the fix.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from detectors.findings import Finding, FindingKind, Severity
from gpufleet.service.context import JobContext, JobRequest
from gpufleet.service.jobs.diagnose import REPLACEMENT_LABEL, DiagnoseParams, run_diagnose
from remediations.cycle import RemediationCycle
from remediations.holds import ORPHAN, holds, owner
from remediations.kube_actuator import KubeActuator
from remediations.kube_jobs import KubeNodeJobs, api_client
from remediations.policy import Policy, policy_from_dict
from remediations.store import Store
from remediations.types import ActionState
from simulator.layout import gpu_uuid
from simulator.scenario import DiagResult
from tests.k8s_sim_support import Sim, running_sim
from tests.service.policies import QUARANTINE_CRITICAL, live_policy_dict

NODES = ("h100-0001", "h100-0003")
EXAMPLES = int(os.environ.get("GPUFLEET_STATEFUL_EXAMPLES", "4"))
STEPS = int(os.environ.get("GPUFLEET_STATEFUL_STEPS", "10"))
QUIET = 60.0
HARDWARE = ("gpu_xid", "gpu_memory", "gpu_lost", "gpu_interconnect")


def _policy() -> Policy:
    drain = {
        "name": "drain-critical",
        "match": {"kinds": ["gpu_memory"], "severities": ["critical"]},
        "playbook": "drain",
        "mode": "approval",
    }
    p = live_policy_dict([QUARANTINE_CRITICAL, drain])
    p["gates"] = {**p["gates"], "return_quiet": f"{QUIET:.0f}s"}
    p["hysteresis"] = {"open_after": 1, "resolve_after": 2}
    return policy_from_dict(p, "stateful-policy")


class World:
    """What lives across Hypothesis examples: the simulation and its API clients."""

    def __init__(self, sim: Sim, tmp: Path) -> None:
        self.sim, self.tmp = sim, tmp
        self.pristine = {n: sim.cluster.get("nodes", "", n) for n in NODES}
        self.examples = 0
        self.steps = 0


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
        self.fault: dict[str, float | None] = dict.fromkeys(NODES)
        """Node -> when its fault appeared (None: healthy)."""
        self.history: list[tuple[float, str, bool]] = []
        self.flaky: set[str] = set()
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
            self.jobs.close()
            self.actuator.close()
            self.store.close()

    # ---- events ------------------------------------------------------------------------------

    @rule(node=st.sampled_from(NODES))
    def fault_appears(self, node: str) -> None:
        if self.fault[node] is None:
            self.fault[node] = self.sim.cluster.clock()
            self.history.append((self.sim.cluster.clock(), node, True))

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
            if a.playbook != "uncordon" or a.started_at is None:
                continue
            node, at = a.target.removeprefix("node/"), a.started_at
            assert not self._faulty_at(node, at), f"{node} returned at {at} with its fault on"
            for i in self.store.incidents_on(node):
                if i.kind in HARDWARE and i.opened_at <= at:
                    assert i.resolved_at is not None and i.resolved_at <= at, (
                        f"{node} returned at {at} while incident {i.id} ({i.kind}) was open"
                    )

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
                FindingKind.GPU_MEMORY,
                Severity.CRITICAL,
                f"DBE on GPU 2 of {n}",
                since,
                now,
                node=n,
                gpu_uuid=gpu_uuid("small", n, 2),
                detector="gpu_memory",
            )
            for n, since in self.fault.items()
            if since is not None
        ]
        self.loop.tick(findings, now, self.actuator.cluster_view(now))

    def _owned(self) -> None:
        view = self.actuator.cluster_view(self.sim.cluster.clock())
        reported = {r.target for r in self.store.audit_log() if r.kind == ORPHAN}
        for h in holds(view):
            assert owner(self.store, h) is not None or h.subject in reported, h

    def _diagnose(self) -> None:
        diags = self.sim.cluster.scenario.diagnostics
        for n in NODES:  # the simulated dcgmi diag: fails while the fault persists, or flakes
            bad = self.fault[n] is not None or n in self.flaky
            diags[n] = DiagResult.FAIL if bad else DiagResult.PASS
        self.flaky.clear()

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
    with running_sim(tmp_path, diagnostic_seconds=60) as s:
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
    assert world.examples >= EXAMPLES and world.steps > EXAMPLES
