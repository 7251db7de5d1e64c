"""Crash safety: kill -9 the engine at every step of a drain; a restarted engine finishes it,
and every Kubernetes write took effect exactly once. On SQLite and PostgreSQL.

The simulator (real API, real `kubernetes` client in the child) runs in this process so it
outlives the killed engine; each crash point gets a fresh simulated cluster and its own journal
`cluster` name. Engine processes are forked from one pre-imported `crash_child --serve` process
(each still its own process, killed with SIGKILL), which saves the imports of every start.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.k8s_sim import small_scenario
from remediations.store import Store
from remediations.types import ActionState
from simulator.cluster import ClusterOptions
from simulator.serve import SimulationHandle, start_simulation

ROOT = Path(__file__).resolve().parents[2]
NODE = "h100-0000"


class Children:
    """The fork server (`crash_child --serve`): `run(argv, out, err, timeout)` -> the child's
    return code (its stdout and stderr are in the files `out` and `err`)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.remediations.crash_child", "--serve"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )

    def _answer(self, deadline: float) -> dict[str, int]:
        assert self.proc.stdout is not None
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
            raise TimeoutError("no answer from the crash child")
        line = self.proc.stdout.readline()
        assert line, f"the fork server exited ({self.proc.poll()})"
        answer: dict[str, int] = json.loads(line)
        return answer

    def run(self, argv: list[str], out: Path, err: Path, timeout: float) -> int:
        assert self.proc.stdin is not None
        deadline = time.monotonic() + timeout
        self.proc.stdin.write(json.dumps({"argv": argv, "out": str(out), "err": str(err)}) + "\n")
        self.proc.stdin.flush()
        pid = self._answer(deadline)["pid"]
        try:
            return self._answer(deadline)["rc"]
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            raise AssertionError(
                f"crash child {argv} ran over {timeout:g} s:\n{out.read_text()}{err.read_text()}"
            ) from None

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def children() -> Iterator[Children]:
    c = Children()
    yield c
    c.close()


def _child(
    children: Children,
    kubeconfig: Path,
    url: str,
    cluster: str,
    first_seen: float,
    crash_at: int,
    tmp_path: Path,
) -> str:
    argv = [str(kubeconfig), url, cluster, str(first_seen), str(crash_at)]
    out_file, err_file = (
        tmp_path / f"{cluster}-{crash_at}.out",
        tmp_path / f"{cluster}-{crash_at}.err",
    )
    returncode = children.run(argv, out_file, err_file, timeout=150)
    stdout = out_file.read_text()
    text = stdout + err_file.read_text()
    if crash_at == 0:
        assert returncode == 0, text
    else:
        assert returncode in (0, -9), text
    return stdout


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


def _run_all_crash_points(children: Children, tmp_path: Path, url: str) -> list[str]:
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
            kc = handle.kubeconfig
            assert kc is not None
            out = _child(children, kc, url, cluster, first_seen, n, tmp_path)
            if out.startswith("DONE"):
                store = Store.open(url, cluster=cluster)
                _check(handle, store)
                store.close()
                break  # n is past the last crash point
            assert out.startswith("CRASH"), out
            seen.append(out.strip())
            done = _child(children, kc, url, cluster, first_seen, 0, tmp_path)
            assert done.startswith("DONE"), done
            store = Store.open(url, cluster=cluster)
            _check(handle, store)
            store.close()
    else:
        pytest.fail("never ran to completion")
    return seen


@pytest.mark.slow
def test_kill_at_every_step_sqlite(children: Children, tmp_path: Path) -> None:
    seen = _run_all_crash_points(children, tmp_path, f"sqlite:///{tmp_path / 'journal.db'}")
    labels = " | ".join(seen)
    assert "before cordon" in labels and "after evicting" in labels and len(seen) >= 10, labels


@pytest.mark.slow
@pytest.mark.postgres
def test_kill_at_every_step_postgres(children: Children, tmp_path: Path, pg_url: str) -> None:
    seen = _run_all_crash_points(children, tmp_path, pg_url)
    print("\n".join(seen))
    assert len(seen) >= 10
