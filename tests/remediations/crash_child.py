"""A gpufleet engine process for the crash tests: decides, runs, and kills itself (SIGKILL) at
the N-th crash point — after any journal transition, before or after any Kubernetes write, after
any single eviction. With N = 0 it runs until every action is terminal and prints DONE.

    python -m tests.remediations.crash_child KUBECONFIG STORE_URL CLUSTER FIRST_SEEN N
    python -m tests.remediations.crash_child --serve

`--serve` is a fork server for the tests: it imports everything once, then for each JSON request
line on stdin ({"argv": [...], "out": path, "err": path}) forks a child that runs `main(argv)`
with stdout in `out` and stderr in `err`, and answers {"pid": ...} then {"rc": ...} (negative:
killed by that signal, as subprocess reports it). Each child is still its own process killed by
SIGKILL; only the ~2 s of imports per engine start is saved (dozens of starts per crash test).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from typing import Any

from detectors.findings import Finding, FindingKind, Severity
from kube.actuator import KubeActuator
from kube.evictions import BLOCKED, PodEvictions
from remediations.capabilities import WriteContext
from remediations.decision_journal import DecisionJournal
from remediations.executor import Executor
from remediations.store import Store
from remediations.types import Intent
from tests.remediations.helpers import live_policy

POLICY = live_policy({
    "hysteresis": {"open_after": 1},
    "gates": {"blast_radius": {"max_nodes": 3, "max_percent_of_pool": 100},
              "protected": {"namespaces": ["kube-system"]}},
    "rules": [
        {"name": "drain", "match": {"kinds": ["gpu_xid"]}, "playbook": "drain", "mode": "auto",
         "params": {"timeout": "2m", "backoff_initial": "0.5s", "backoff_max": "1s",
                    "verify_timeout": "1m"}},
    ],
})  # fmt: skip
NODE = "h100-0000"
_count = 0
_crash_at = 0


def crash_point(label: str) -> None:
    global _count
    _count += 1
    if _count == _crash_at:
        print(f"CRASH {_count} {label}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


class CrashingStore(Store):
    def update_action(self, *args: Any, **kwargs: Any) -> Any:
        out = super().update_action(*args, **kwargs)
        crash_point(f"after transition {kwargs.get('message') or kwargs.get('state')}")
        return out

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        out = super().claim(*args, **kwargs)
        crash_point("after claim (approved -> executing)")
        return out

    def propose_many(self, *args: Any, **kwargs: Any) -> int:
        out = super().propose_many(*args, **kwargs)
        crash_point("after journaling decisions")
        return out


class CrashingEvictions(PodEvictions):
    def evict(self, ns: str, name: str, uid: str, grace: int | None, ctx: WriteContext) -> str:
        out = super().evict(ns, name, uid, grace, ctx)
        crash_point(f"after evicting {ns}/{name} ({'429' if out == BLOCKED else 'ok'})")
        return out


class CrashingActuator(KubeActuator):
    def __init__(self, api: Any, **kw: Any) -> None:
        super().__init__(api, **kw)
        self.writer.evictions = CrashingEvictions(self.core, **kw)

    def apply(self, intent: Intent, ctx: WriteContext) -> str:
        crash_point(f"before {intent.op}")
        out = super().apply(intent, ctx)
        crash_point(f"after {intent.op}")
        return out


def main(argv: list[str]) -> int:
    global _crash_at
    kubeconfig, url, cluster, first_seen, crash_at = argv
    _crash_at = int(crash_at)
    store = CrashingStore.open(url, cluster=cluster)
    act = CrashingActuator.from_kubeconfig(kubeconfig)
    started = time.time()
    eng = DecisionJournal(POLICY, store, started_at=started - 1)
    runner = Executor(POLICY, store, act, owner="crash-test", open_incidents=eng.open_incident_ids)
    while time.time() - started < 90:
        now = time.time()
        f = Finding(
            FindingKind.GPU_XID,
            Severity.CRITICAL,
            "xid 79",
            float(first_seen),
            now,
            node=NODE,
            gpu_uuid="GPU-crash",
        )
        eng.cycle([f], act.cluster_view(now), now)
        runner.run(act.cluster_view(now), now)
        actions = store.actions()
        if actions and all(a.state.terminal for a in actions):
            print("DONE", " ".join(f"{a.playbook}={a.state.value}" for a in actions), flush=True)
            return 0
        time.sleep(0.3)
    print("TIMEOUT", [(a.playbook, a.state.value, a.result) for a in store.actions()], flush=True)
    return 1


def _forked(argv: list[str], out: str, err: str) -> None:
    """In the forked child: output to `out` and `err`, run main, exit without the parent's
    cleanup."""
    code = 1
    try:
        for path, target in ((out, 1), (err, 2)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, target)
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _preload() -> None:
    """Import now what is otherwise imported on first use, so no child pays for it: the
    kubernetes client's APIs and models (loaded lazily by name) and the database dialects."""
    import psycopg  # noqa: F401
    import sqlalchemy.dialects.postgresql.psycopg
    import sqlalchemy.dialects.sqlite.pysqlite  # noqa: F401
    from kubernetes import client

    for name in dir(client):
        if name.startswith(("V1", "CoreV1", "ResourceV1")):
            getattr(client, name)


def serve() -> int:
    _preload()

    for line in sys.stdin:
        req = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _forked([str(a) for a in req["argv"]], str(req["out"]), str(req["err"]))
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"rc": os.waitstatus_to_exitcode(status)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(serve() if sys.argv[1:] == ["--serve"] else main(sys.argv[1:]))
