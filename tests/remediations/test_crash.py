"""Crash safety: kill -9 the engine at every step of a drain; a restarted engine finishes it,
and every Kubernetes write took effect exactly once. On SQLite and PostgreSQL.

The simulator (real API, real `kubernetes` client in the child) runs in this process so it
outlives the killed engine; each crash point gets a fresh simulated cluster and its own journal
`cluster` name.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remediations.store import Store
from remediations.types import ActionState
from simulator.cluster import ClusterOptions
from simulator.serve import SimulationHandle, start_simulation
from tests.k8s_sim_support import small_scenario

ROOT = Path(__file__).resolve().parents[2]
NODE = "h100-0000"


def _child(kubeconfig: Path, url: str, cluster: str, first_seen: float, crash_at: int) -> str:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.remediations.crash_child",
            str(kubeconfig),
            url,
            cluster,
            str(first_seen),
            str(crash_at),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=150,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    out = proc.stdout + proc.stderr
    if crash_at == 0:
        assert proc.returncode == 0, out
    else:
        assert proc.returncode in (0, -9), out
    return proc.stdout


def _check(handle: SimulationHandle, store: Store) -> None:
    actions = store.actions()
    assert [(a.playbook, a.state) for a in actions] == [("drain", ActionState.DONE)], actions
    a = actions[0]
    assert a.progress == len(a.plan) == 2
    v1 = handle.cluster
    node = v1.store.get("nodes", "", NODE)
    assert node is not None and node["spec"].get("unschedulable") is True
    for rank in ("train-worker-0", "train-worker-1"):
        pod = v1.store.get("pods", "ml", rank)
        assert pod is not None and pod["spec"].get("nodeName") != NODE
        placements = [p for p in v1.pods_for_metrics() if p.name == rank]
        ended = sum(p.end is not None for p in placements)
        assert ended == 1, f"{rank} evicted {ended} times"
    cordons = [r for r in store.audit_log() if r.message.startswith("did cordon")]
    assert len(cordons) >= 1


def _run_all_crash_points(tmp_path: Path, url: str) -> list[str]:
    seen: list[str] = []
    for n in range(1, 60):
        with start_simulation(
            small_scenario(),
            kubeconfig_out=tmp_path / f"kc-{n}",
            options=ClusterOptions(startup_seconds=1.0, termination_seconds=0.0, history=5000),
            tick_interval=0.1,
        ) as handle:
            cluster = f"crash-{n}-{time.time_ns()}"
            first_seen = time.time()
            out = _child(handle.kubeconfig, url, cluster, first_seen, n)  # type: ignore[arg-type]
            if out.startswith("DONE"):
                store = Store.open(url, cluster=cluster)
                _check(handle, store)
                store.close()
                break  # n is past the last crash point
            assert out.startswith("CRASH"), out
            seen.append(out.strip())
            done = _child(handle.kubeconfig, url, cluster, first_seen, 0)  # type: ignore[arg-type]
            assert done.startswith("DONE"), done
            store = Store.open(url, cluster=cluster)
            _check(handle, store)
            store.close()
    else:
        pytest.fail("never ran to completion")
    return seen


@pytest.mark.slow
def test_kill_at_every_step_sqlite(tmp_path: Path) -> None:
    seen = _run_all_crash_points(tmp_path, f"sqlite:///{tmp_path / 'journal.db'}")
    labels = " | ".join(seen)
    assert "before cordon" in labels and "after evicting" in labels and len(seen) >= 10, labels


@pytest.mark.slow
@pytest.mark.postgres
def test_kill_at_every_step_postgres(tmp_path: Path, pg_url: str) -> None:
    seen = _run_all_crash_points(tmp_path, pg_url)
    print("\n".join(seen))
    assert len(seen) >= 10
