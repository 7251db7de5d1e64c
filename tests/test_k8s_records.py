"""Node and Pod records from kube-state-metrics series and from API objects agree."""

from __future__ import annotations

import numpy as np

from observer.snapshot.builder import build_snapshot
from observer.snapshot.inputs import GpuColumns
from observer.snapshot.job_identity import label_value
from observer.snapshot.kube_records import (
    node_from_api,
    nodes_from_kube_state_metrics,
    pod_from_api,
    pods_from_kube_state_metrics,
)

KF = "training.kubeflow.org"


def api_pod(i: int) -> dict[str, object]:
    return {
        "metadata": {
            "namespace": "ml",
            "name": f"pt-worker-{i}",
            "labels": {f"{KF}/job-name": "pt", f"{KF}/replica-index": str(i)},
            "ownerReferences": [{"kind": "PyTorchJob", "name": "pt", "controller": True}],
        },
        "spec": {"nodeName": f"n{i}", "priorityClassName": "high"},
        "status": {"phase": "Running"},
    }


def ksm_pod(i: int) -> tuple[dict[str, str], dict[str, str]]:
    info = {
        "namespace": "ml",
        "pod": f"pt-worker-{i}",
        "uid": "u",
        "node": f"n{i}",
        "created_by_kind": "PyTorchJob",
        "created_by_name": "pt",
        "priority_class": "high",
        "host_ip": "10.0.0.1",
    }
    labels = {
        "namespace": "ml",
        "pod": f"pt-worker-{i}",
        "uid": "u",
        "label_training_kubeflow_org_job_name": "pt",
        "label_training_kubeflow_org_replica_index": str(i),
    }
    return info, labels


def test_pods_from_both_sources_make_the_same_jobs() -> None:
    api = [pod_from_api(api_pod(i)) for i in (1, 0)]
    rows = [ksm_pod(i) for i in (1, 0)]
    ksm = pods_from_kube_state_metrics(
        [r[0] for r in rows],
        [r[1] for r in rows],
        [
            ({"namespace": "ml", "pod": "pt-worker-1", "phase": "Running"}, 1.0),
            ({"namespace": "ml", "pod": "pt-worker-1", "phase": "Pending"}, 0.0),
        ],
    )
    assert ksm[0].phase == "Running" and ksm[1].phase == "Running"  # 2nd: has a node
    for a, k in zip(api, ksm, strict=True):
        assert (a.namespace, a.name, a.node, a.owner_kind, a.owner_name, a.priority_class) == (
            k.namespace,
            k.name,
            k.node,
            k.owner_kind,
            k.owner_name,
            k.priority_class,
        )
        assert label_value(a.labels, f"{KF}/job-name") == label_value(k.labels, f"{KF}/job-name")
    gpus = GpuColumns.from_labels(
        {
            "UUID": ["g0", "g1"],
            "Hostname": ["n0", "n1"],
            "gpu": ["0", "0"],
            "modelName": ["m", "m"],
            "pod": ["pt-worker-0", "pt-worker-1"],
            "namespace": ["ml", "ml"],
        }
    )
    a_snap = build_snapshot(0.0, gpus, {}, pods=api)
    k_snap = build_snapshot(0.0, gpus, {}, pods=ksm)
    for snap in (a_snap, k_snap):
        assert [j.key for j in snap.jobs] == ["ml/pt"]
        assert snap.jobs[0].kind == f"{KF}/job-name"
        assert [snap.pods[i].rank for i in snap.jobs[0].pod_indices] == [0, 1]
        assert np.array_equal(snap.gpus.job_index, [0, 0])
    unscheduled = pods_from_kube_state_metrics([{"namespace": "a", "pod": "b", "node": ""}])
    assert unscheduled[0].phase == "Pending" and unscheduled[0].node is None


def test_nodes_from_both_sources() -> None:
    api = node_from_api(
        {
            "metadata": {"name": "n0", "labels": {"nvidia.com/gpu.product": "H100"}},
            "spec": {
                "unschedulable": True,
                "taints": [{"key": "gpu", "value": "bad", "effect": "NoSchedule"}],
            },
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    (ksm, extra) = nodes_from_kube_state_metrics(
        node_info=[{"node": "n0", "kernel_version": "5.15"}],
        node_labels=[
            {"node": "n0", "label_nvidia_com_gpu_product": "H100"},
            {"node": "n9", "label_x": "y"},
        ],
        unschedulable=[({"node": "n0"}, 1.0)],
        conditions=[
            ({"node": "n0", "condition": "Ready", "status": "true"}, 1.0),
            ({"node": "n0", "condition": "Ready", "status": "false"}, 0.0),
        ],
        taints=[{"node": "n0", "key": "gpu", "value": "bad", "effect": "NoSchedule"}],
    )
    for n in (api, ksm):
        assert n.name == "n0" and not n.schedulable and n.ready
        assert n.taints[0].effect == "NoSchedule"
        assert label_value(n.labels, "nvidia.com/gpu.product") == "H100"
    assert extra.name == "n9" and extra.schedulable


def test_api_objects_in_snake_case() -> None:
    p = pod_from_api(
        {
            "metadata": {
                "namespace": "x",
                "name": "y",
                "owner_references": [{"kind": "Job", "name": "j"}],
            },
            "spec": {"node_name": "n", "priority_class_name": "p"},
            "status": {},
        }
    )
    assert (p.node, p.owner_kind, p.priority_class, p.phase) == ("n", "Job", "p", "Unknown")
