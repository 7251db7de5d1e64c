"""Job detectors on time-sliced GPUs: nccl_hang and straggler watch every job holding a shared GPU,
so a job whose GPUs are all shared with another job's pods is still watched (issue 27, finding 5).
The GPU table names one pod per GPU (here the later job's); the other job is only in
`FleetSnapshot.shared_pods`, which the old detectors ignored."""

from __future__ import annotations

import numpy as np

from detectors.findings import FindingKind
from detectors.signals import GR_ACTIVE, POWER, TENSOR_ACTIVE, UTIL
from tests.detector_replay import all_findings, replay, steps
from tests.fleet import Fleet

T0 = 1_767_225_600.0
WAIT = 0.8


def _shared_training() -> Fleet:
    """4 nodes x 8 GPUs, time-sliced between job ml/llm and job ml/side (one pod per node each);
    the GPU table names ml/side's pods, ml/llm holds every GPU as a shared pod."""
    return (
        Fleet(nodes=4, gpus_per_node=8, time_sliced=True)
        .job("ml/llm", [0, 1, 2, 3])
        .job("ml/side", [0, 1, 2, 3])
    )


def test_the_fleet_shares_every_gpu_between_the_two_jobs() -> None:
    snap = _shared_training().snapshot(T0)
    llm = [str(j.key) for j in snap.jobs].index("ml/llm")
    assert not (snap.gpus.job_index == llm).any()  # the GPU table alone: ml/llm holds nothing
    assert len(snap.gpus_of_job(llm)) == 32


def test_a_hang_is_found_on_a_job_whose_gpus_are_all_shared() -> None:
    fleet = _shared_training()
    start = T0 + 600

    def change(f: Fleet, t: float) -> None:
        hung = t >= start
        f.set(UTIL, 99.5 if hung else 98.0).set(GR_ACTIVE, 0.012 if hung else 0.92)
        f.set(TENSOR_ACTIVE, 0.002 if hung else 0.6).set(POWER, 110.0 if hung else 600.0)

    found = all_findings(replay("nccl_hang", fleet, steps(T0, T0 + 900), change))
    assert {f.job for f in found} == {"ml/llm", "ml/side"}  # old code: ml/side only
    llm = next(f for f in found if f.job == "ml/llm")
    assert llm.kind is FindingKind.NCCL_HANG
    assert llm.evidence["gpus_total"] == 32 and llm.evidence["gpus_with_signature"] == 32
    assert llm.evidence["nodes"] == ["node-000", "node-001", "node-002", "node-003"]


def test_a_straggler_is_found_in_a_job_whose_gpus_are_all_shared() -> None:
    fleet = _shared_training()
    start = T0 + 300
    bad = fleet.mask(gpu=(2, 3))

    def change(f: Fleet, t: float) -> None:
        slow = bad if t >= start else np.ones(f.n, dtype=bool)
        f.set(GR_ACTIVE, np.where(slow, 0.92, 0.92 * WAIT))
        f.set(UTIL, np.where(slow, 98.0, 98.0 * WAIT))
        f.set(TENSOR_ACTIVE, np.where(slow, 0.6, 0.6 * WAIT))

    found = all_findings(replay("straggler", fleet, steps(T0, T0 + 900), change))
    # old code: ml/side only
    assert {(f.gpu_uuid, f.job) for f in found} == {
        ("GPU-002-3", "ml/llm"),
        ("GPU-002-3", "ml/side"),
    }


def test_healthy_shared_jobs_stay_quiet() -> None:
    fleet = _shared_training()
    fleet.set(UTIL, 98.0).set(GR_ACTIVE, 0.92).set(TENSOR_ACTIVE, 0.6).set(POWER, 600.0)
    for name in ("nccl_hang", "straggler"):
        assert all_findings(replay(name, fleet, steps(T0, T0 + 900))) == [], name
