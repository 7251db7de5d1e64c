"""A scheduled job's action carried out exactly once while the background executor, the job's
own path (`gated.execute`) and a runner of another process all go for it at the same moment:
the journal's version-checked claim lets one start it; every write happens once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from harness.live_policy import live_policy
from remediations.cycle import RemediationCycle
from remediations.executor import Executor
from remediations.playbooks import PLAYBOOKS, Subject
from remediations.scheduled.gated import execute, plan_for, propose
from remediations.store import Store
from remediations.types import ActionState, IncidentId
from tests.service.test_schedule import _Cluster


def test_scheduled_action_runs_once_against_the_executor_thread(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'j.db'}", cluster="c1")
    cluster = _Cluster({"p": 4})
    policy = live_policy()
    now = time.time()
    loop = RemediationCycle(
        policy, store, cluster, "svc", started_at=now - 60, clock=time.time, background=True,
        idle_wait=0.01,
    )  # fmt: skip
    other = Executor(policy, store, cluster, "other-process")
    try:
        view = cluster.cluster_view(now)
        subject = Subject(IncidentId("inc-1"), "gpu_memory", "critical", "DBE", "p-0001")
        plan = plan_for("quarantine", subject, view, PLAYBOOKS["quarantine"].params({}))
        assert not isinstance(plan, str)
        assert loop.worker is not None
        loop.worker.start()  # running before the action is journaled: it must not expire it
        action, why = propose(
            loop, "job", "inc-1", "gpu_memory", now, plan, view, now, reasons=("test",)
        )
        assert action is not None and action.state is ActionState.APPROVED, why
        go = threading.Event()

        def job_path() -> None:
            go.wait()
            execute(loop, [action.id], view, time.time())

        def inline() -> None:  # the scheduled job's path without a background executor
            go.wait()
            loop.runner.run(view, time.time(), fresh=loop.still_needed)

        def elsewhere() -> None:
            go.wait()
            other.run(view, time.time(), fresh=lambda a: None)

        threads = [threading.Thread(target=f) for f in (job_path, inline, inline, elsewhere)]
        for t in threads:
            t.start()
        go.set()
        for t in threads:
            t.join(10)
        assert loop.settle(10)
        done = store.get_action(action.id)
        assert done is not None and done.state is ActionState.DONE, done
        mine = [w for w in cluster.writes if w[2] == action.id]
        assert len(mine) == len(set(mine)) and mine, cluster.writes  # each write once
        claims = [r for r in store.audit_log() if "approved -> executing" in r.message]
        assert len(claims) == 1, [r.message for r in claims]
        assert not [r for r in store.audit_log() if r.kind == "resume"]
    finally:
        loop.close()
        store.close()
