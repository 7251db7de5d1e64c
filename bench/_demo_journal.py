"""The live demo's journal for a fixed seed, as sorted JSON: before/after evidence for refactors of
the composition root (issue 26). Not a benchmark (no `run`): `python -m bench._demo_journal OUT`.

It starts the live demo scenario (simulator/demo-live.yaml: seed 7, the `make demo` fleet) on a
manual wall clock, assembles the service exactly as `gpufleet run --embedded` does (its config,
the demo policy it writes, direct scrape, the journal under a fresh workdir), and runs one
service cycle per scrape interval over the whole fault timeline (20 scenario minutes). After each
cycle the background executor is waited for, and whatever awaits approval is approved as a person
would with `gpufleet actions approve` (a DecisionJournal over the same journal). The scheduled
jobs are not fired: their cron times are wall-clock times, which a manual clock cannot reach.

The dump: incidents, actions (playbook, target, rule, state, result) and audit rows (kind,
target, message), every time relative to the scenario start; sorted, ids left out (they hash
times and random parts), so two runs of the same code compare equal line by line.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from remediations.decision_journal import DecisionJournal
from remediations.policy import load_policy
from remediations.store import Store
from remediations.types import ActionState
from simulator.clock import ManualWall
from simulator.scenario import LIVE_DEMO_SCENARIO, load_scenario
from simulator.serve import SimulationHandle, start_simulation

START = 1_800_000_000.0
"""A fixed scenario start (2027-01-15T08:00:00Z), so journal rows hash the same each run."""
CYCLES = 40
"""20 scenario minutes at the demo's 30 s interval: every fault of demo-live.yaml (the last at
11 min, the scrape gap at 14-15 min) and a few cycles after."""
APPROVER = "journal-script"


def _start(workdir: Path, wall: ManualWall) -> SimulationHandle:
    sc = load_scenario(LIVE_DEMO_SCENARIO).model_copy(update={"start": START})
    return start_simulation(sc, kubeconfig_out=workdir / "kc", wall=wall, tick_interval=0.05)


def _approve_waiting(store_url: str, cluster: str, policy: Path, now: float) -> None:
    store = Store.open(store_url, cluster=cluster)
    try:
        journal = DecisionJournal(load_policy(policy), store, started_at=now)
        for a in store.actions([ActionState.AWAITING_APPROVAL]):
            journal.approve(a.id, APPROVER, now)
    finally:
        store.close()


_HEX = re.compile(r"\b[0-9a-f]{8,}\b")
_PORT = re.compile(r"127\.0\.0\.1:\d+")
_POD_SUFFIX = re.compile(r"-[bcdfghjklmnpqrstvwxz2-9]{5}\b")
"""The random suffix Kubernetes (and the simulated ReplicaSet) gives a recreated pod."""


def _rel(t: float | None) -> float | None:
    return None if t is None else round(t - START, 1)


def _text(s: str) -> str:
    """Ids, ports and recreated pods' random suffixes out of a message: they differ run to run."""
    return _POD_SUFFIX.sub("-<rnd>", _PORT.sub("<sim>", _HEX.sub("<id>", s)))


def dump(store_url: str, cluster: str) -> dict[str, Any]:
    store = Store.open(store_url, cluster=cluster)
    try:
        incidents = sorted(
            (i.kind, i.entity_key, i.severity, i.status.value, _rel(i.opened_at),
             _rel(i.resolved_at), _text(i.summary))
            for i in store.incidents()
        )  # fmt: skip
        actions = sorted(
            (a.playbook, a.target, a.rule, a.mode.value, a.state.value, a.decision.value,
             _rel(a.created_at), _text(a.result or ""))
            for a in store.actions()
        )  # fmt: skip
        audit = sorted(
            (_rel(r.at), r.kind, r.actor, r.target, _text(r.message)) for r in store.audit_log()
        )
    finally:
        store.close()
    return {"incidents": incidents, "actions": actions, "audit": audit}


def record(out: Path, cycles: int = CYCLES) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="demo-journal-") as tmp:
        wd = Path(tmp)
        wall = ManualWall(START)
        handle = _start(wd, wall)
        try:
            from gpufleet.demo.embedded import EmbeddedOptions, assemble

            opts = EmbeddedOptions(workdir=wd / "wd", prometheus=False, identity="demo-journal")
            embedded = assemble(handle, opts, clock=handle.clock)
            service, files = embedded.service, embedded.files
            try:
                service.lead()
                interval = handle.scenario.scrape_interval
                for _ in range(cycles):
                    wall.advance(interval)
                    handle.cluster.tick()
                    service.cycle_now()
                    service.settle(30.0)
                    _approve_waiting(files.store_url, handle.scenario.cluster, files.policy, wall())
            finally:
                service.shutdown()
            body = dump(files.store_url, handle.scenario.cluster)
        finally:
            handle.stop()
    out.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
    return body


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "demo_journal.json")
    got = record(target)
    print(f"{target}: {len(got['incidents'])} incidents, {len(got['actions'])} actions, "
          f"{len(got['audit'])} audit rows")  # fmt: skip
