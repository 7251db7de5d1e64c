"""A gpufleet engine process for the crash tests: decides, runs, and kills itself (SIGKILL) at
the N-th crash point — after any journal transition, before or after any Kubernetes write, after
any single eviction. With N = 0 it runs until every action is terminal and prints DONE.

    python -m tests.remediations.crash_child KUBECONFIG STORE_URL CLUSTER FIRST_SEEN N
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

from detectors.findings import Finding, FindingKind, Severity
from remediations.actuator_api import WriteContext
from remediations.decision_journal import RemediationEngine
from remediations.executor import Runner
from remediations.kube_actuator import KubeActuator
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


class CrashingActuator(KubeActuator):
    def apply(self, intent: Intent, ctx: WriteContext) -> str:
        crash_point(f"before {intent.op}")
        out = super().apply(intent, ctx)
        crash_point(f"after {intent.op}")
        return out

    def _evict(self, ns: str, name: str, uid: str, grace: int | None, ctx: WriteContext) -> bool:
        out = super()._evict(ns, name, uid, grace, ctx)
        crash_point(f"after evicting {ns}/{name} ({'ok' if out else '429'})")
        return out


def main(argv: list[str]) -> int:
    global _crash_at
    kubeconfig, url, cluster, first_seen, crash_at = argv
    _crash_at = int(crash_at)
    store = CrashingStore.open(url, cluster=cluster)
    act = CrashingActuator.from_kubeconfig(kubeconfig)
    started = time.time()
    eng = RemediationEngine(POLICY, store, started_at=started - 1)
    runner = Runner(POLICY, store, act, owner="crash-test", open_incidents=eng.open_incident_ids)
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
