"""The simulator's `dcgmi diag` is honest: the hardware's state decides, not only the scenario.

With the real `kubernetes` client against the simulator's API: a diagnostic Job on a GPU whose
double-bit ECC fault persists fails (though the scenario lists every diagnostic as passing), one
on a GPU fallen off the bus fails, and after a reset Job cleared the DBE fault the diagnostic
passes. With `diagnostic_flake_rate` the diagnostics right after a repair fail at that rate, the
same Job name always drawing the same outcome (seeded), and none fails once the flaky window is
over.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.k8s_sim import Sim, running_sim
from kube.jobs import JobStatus, KubeNodeJobs, api_client
from simulator.batch_jobs import REPAIR_LABEL
from simulator.repairs import INDEX_LABEL

NS = "gpufleet"
DBE = ("h100-0003", 0)
OFF_BUS = ("h100-0003", 5)


def _faults() -> list[dict[str, object]]:
    return [
        {"kind": "xid48_dbe", "node": DBE[0], "gpu": DBE[1], "start": 0},
        {"kind": "xid79_fallen_off_bus", "node": OFF_BUS[0], "gpu": OFF_BUS[1], "start": 0},
    ]


@pytest.fixture
def jobs(tmp_path: Path) -> Iterator[tuple[Sim, KubeNodeJobs]]:
    with running_sim(
        tmp_path,
        faults=_faults(),
        diagnostics={DBE[0]: "pass"},
        diagnostic_seconds=60,
        reset_seconds=10,
        diagnostic_flake_rate=0.5,
        diagnostic_flaky_seconds=600,
    ) as s:
        j = KubeNodeJobs(api_client(s.kubeconfig))
        yield s, j
        j.close()


def _run(sim: Sim, j: KubeNodeJobs, node: str, name: str, gpu: int | None = None) -> JobStatus:
    cmd = ["dcgmi", "diag", "-r", "2"] + ([] if gpu is None else ["-i", str(gpu)])
    j.ensure(NS, node, name, "dcgm", cmd, {})
    for _ in range(4):
        sim.advance(30)
    got = j.status(NS, name)
    assert got is not None and got.outcome is not None, got
    return got


def _reset(sim: Sim, j: KubeNodeJobs, node: str, gpu: int) -> JobStatus:
    name = f"reset-{node}-{gpu}"
    labels = {REPAIR_LABEL: "reset-gpu", INDEX_LABEL: str(gpu)}
    j.ensure(NS, node, name, "cuda", ["nvidia-smi", "-r", "-i", str(gpu)], labels)
    sim.advance(5)
    sim.advance(10)
    got = j.status(NS, name)
    assert got is not None and got.outcome is not None, got
    return got


def test_diagnostics_fail_while_a_hard_fault_persists_and_pass_only_after_a_real_repair(
    jobs: tuple[Sim, KubeNodeJobs],
) -> None:
    sim, j = jobs
    sim.advance(30)
    dbe = _run(sim, j, DBE[0], "diag-dbe-gpu", DBE[1])
    assert dbe.outcome == "failed" and "double bit ECC error (XID 48) persists" in dbe.detail
    node = _run(sim, j, DBE[0], "diag-dbe-node")  # a node-wide run covers the faulty GPU
    assert node.outcome == "failed"
    assert _run(sim, j, DBE[0], "diag-dbe-other", 3).outcome == "passed"  # its neighbour
    off = _run(sim, j, OFF_BUS[0], "diag-off-bus", OFF_BUS[1])
    assert off.outcome == "failed" and "fallen off the bus" in off.detail

    assert _reset(sim, j, OFF_BUS[0], OFF_BUS[1]).outcome == "failed"  # a reset cannot reach it
    assert _run(sim, j, OFF_BUS[0], "diag-off-bus-2", OFF_BUS[1]).outcome == "failed"
    assert _reset(sim, j, DBE[0], DBE[1]).outcome == "passed"

    # right after the repair: flaky, half of them fail (seeded: a name draws one outcome)
    after = {f"diag-after-{i}": _run(sim, j, DBE[0], f"diag-after-{i}", DBE[1]) for i in range(8)}
    failed = sorted(n for n, s in after.items() if s.outcome == "failed")
    assert 0 < len(failed) < 8, failed
    assert all("intermittently" in after[n].detail for n in failed)
    sim.advance(600)  # the flaky window is over: the repaired GPU passes every time
    assert all(_run(sim, j, DBE[0], f"diag-late-{i}", DBE[1]).outcome == "passed" for i in range(4))
