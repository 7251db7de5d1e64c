"""Job identity: jobs and ranks from each operator's labels, label priority, replacements."""

from __future__ import annotations

import dataclasses

import pytest

from observer.fleet.model import NO_INDEX, NodeName, Pod, frozen_map
from observer.snapshot.builder import build_snapshot
from observer.snapshot.job_identity import JobIdentity
from tests.snapshot_fixtures import (
    NOW,
    gpu_rows,
    pod,
    row,
    two_node_fleet,
)


@pytest.mark.parametrize(
    ("labels", "expected_kind"),
    [
        (
            lambda i: {
                "training.kubeflow.org/job-name": "j",
                "training.kubeflow.org/replica-index": str(i),
            },
            "training.kubeflow.org/job-name",
        ),
        (
            lambda i: {
                "jobset.sigs.k8s.io/jobset-name": "j",
                "jobset.sigs.k8s.io/job-index": str(i // 2),
                "batch.kubernetes.io/job-completion-index": str(i % 2),
                "batch.kubernetes.io/job-name": f"j-workers-{i // 2}",
            },
            "jobset.sigs.k8s.io/jobset-name",
        ),
        (
            lambda i: {"volcano.sh/job-name": "j", "volcano.sh/task-index": str(i)},
            "volcano.sh/job-name",
        ),
        (
            lambda i: {
                "batch.kubernetes.io/job-name": "j",
                "batch.kubernetes.io/job-completion-index": str(i),
            },
            "batch.kubernetes.io/job-name",
        ),
        (lambda i: {"job-name": "j"}, "job-name"),  # rank from the pod name's ordinal
        (  # kube-state-metrics' sanitised label names
            lambda i: {
                "label_training_kubeflow_org_job_name": "j",
                "label_training_kubeflow_org_replica_index": str(i),
            },
            "training.kubeflow.org/job-name",
        ),
    ],
)
def test_job_identity_and_rank_for_each_operator(labels, expected_kind: str) -> None:
    order = [3, 0, 2, 1]  # listed out of rank order, on nodes in another order
    pods = [pod("ns", f"j-w-{i}", f"n{9 - i}", **labels(i)) for i in order]
    rows = [row(f"n{9 - i}", 0, f"j-w-{i}", "ns") for i in order]
    snap = build_snapshot(NOW, gpu_rows(rows), {}, pods=pods)
    (job,) = snap.jobs
    assert job.key == "ns/j"
    assert job.kind == expected_kind
    assert [snap.pods[i].name for i in job.pod_indices] == [f"j-w-{i}" for i in range(4)]
    assert [snap.pods[i].rank for i in job.pod_indices] == [0, 1, 2, 3]
    ranks = [snap.pods[p].rank for p in snap.gpus.pod_index]
    assert ranks == [3, 2, 1, 0]  # GPUs ordered by node name n6..n9


def test_leaders_rank_first_and_launchers_have_no_rank() -> None:
    kf = "training.kubeflow.org/"
    pods = [
        pod(
            "ml",
            "pt-master-0",
            "a",
            **{f"{kf}job-name": "pt", f"{kf}replica-type": "master", f"{kf}replica-index": "0"},
        ),
        pod(
            "ml",
            "pt-worker-0",
            "b",
            **{f"{kf}job-name": "pt", f"{kf}replica-type": "worker", f"{kf}replica-index": "0"},
        ),
        pod(
            "ml",
            "pt-worker-1",
            "c",
            **{f"{kf}job-name": "pt", f"{kf}replica-type": "worker", f"{kf}replica-index": "1"},
        ),
        pod("ml", "mpi-launcher", "a", **{f"{kf}job-name": "mpi", f"{kf}replica-type": "launcher"}),
        pod(
            "ml",
            "mpi-worker-0",
            "b",
            **{f"{kf}job-name": "mpi", f"{kf}replica-type": "worker", f"{kf}replica-index": "0"},
        ),
    ]
    recs, jobs = JobIdentity().assign(pods)
    by_name = {p.name: p for p in recs}
    assert [by_name[n].rank for n in ("pt-master-0", "pt-worker-0", "pt-worker-1")] == [0, 1, 2]
    assert by_name["mpi-launcher"].rank == NO_INDEX
    assert by_name["mpi-worker-0"].rank == 0
    mpi = next(j for j in jobs if j.key == "ml/mpi")
    assert [recs[i].name for i in mpi.pod_indices] == ["mpi-worker-0", "mpi-launcher"]


def test_job_label_priority_and_custom_keys() -> None:
    js = pod(
        "ns",
        "x-0",
        "n",
        **{
            "jobset.sigs.k8s.io/jobset-name": "big",
            "batch.kubernetes.io/job-name": "big-workers-0",
        },
    )
    assert JobIdentity().job_of(js) == ("ns/big", "jobset.sigs.k8s.io/jobset-name")
    custom = pod("ns", "y-0", "n", **{"team.example.com/run": "r1"})
    assert JobIdentity().job_of(custom) is None
    assert JobIdentity(("team.example.com/run",)).job_of(custom) == (
        "ns/r1",
        "team.example.com/run",
    )
    snap = build_snapshot(
        NOW, gpu_rows([]), {}, pods=[custom], job_label_keys=("team.example.com/run",)
    )
    assert [j.key for j in snap.jobs] == ["ns/r1"]


def test_jobset_global_index_and_replacement_pods() -> None:
    js = "jobset.sigs.k8s.io/"
    done = "batch.kubernetes.io/job-completion-index"

    def member(name: str, rjob: str, global_index: int, completion: int, phase: str) -> Pod:
        labels = {
            f"{js}jobset-name": "js",
            f"{js}replicatedjob-name": rjob,
            f"{js}job-index": "0",
            f"{js}job-global-index": str(global_index),
            done: str(completion),
        }
        return Pod("ns", name, NodeName("n"), phase=phase, labels=frozen_map(labels))

    pods = [
        member("js-workers-0-1-old", "workers", 1, 1, "Failed"),
        member("js-workers-0-1-new", "workers", 1, 1, "Running"),
        member("js-workers-0-0", "workers", 1, 0, "Running"),
        member("js-driver-0-0", "driver", 0, 0, "Running"),
        member("js-driver-0-1", "driver", 0, 1, "Running"),
    ]
    recs, (job,) = JobIdentity().assign(pods)
    assert [(recs[i].name, recs[i].rank) for i in job.pod_indices] == [
        ("js-driver-0-0", 0),
        ("js-driver-0-1", 1),
        ("js-workers-0-0", 2),
        ("js-workers-0-1-new", 3),
        ("js-workers-0-1-old", 3),
    ]


def test_pod_records_from_an_earlier_snapshot_are_reassigned() -> None:
    first = two_node_fleet()
    stale = [dataclasses.replace(p, job_index=5, rank=9) for p in first.pods]
    loner = Pod("ml", "solo", NodeName("n1"), job_index=3, rank=2)
    recs, _ = JobIdentity().assign([*first.pods, *stale[:1], loner])
    assert [p.job_index for p in recs] == [0, 0, 0, NO_INDEX]
    assert [p.rank for p in recs] == [0, 1, 0, NO_INDEX]
    assert recs[0] is first.pods[0]  # already right: reused, not rebuilt
