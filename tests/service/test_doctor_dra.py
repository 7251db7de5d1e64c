"""`gpufleet doctor`'s DRA row against the simulator as each Kubernetes release: it names the
version that serves DeviceTaintRules, or says plainly that single-GPU fencing needs a newer
cluster (or the DRADeviceTaints gate) and that fence_gpu falls back to the pods-on-GPU grain."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.config import GpufleetConfig
from gpufleet.doctor.check_table import OK, WARN
from gpufleet.doctor.kube_checks import kubernetes_checks
from harness.k8s_sim import running_sim
from remediations.policy import policy_from_dict

FENCE_POLICY = policy_from_dict(
    {
        "rules": [
            {
                "name": "fence",
                "match": {"kinds": ["gpu_xid"]},
                "playbook": "fence_gpu",
                "mode": "approval",
            }
        ]
    }
)


@pytest.mark.parametrize(
    ("release", "gate", "status", "says"),
    [
        ("1.34", False, WARN, "needs a cluster that serves DeviceTaintRules"),
        ("1.35", True, OK, "resource.k8s.io/v1alpha3"),
        ("1.36", False, WARN, "falls back to the pods-on-GPU grain"),
        ("1.35", False, WARN, "a NoExecute fence also evicts the GPU's pods"),
        ("1.36", True, OK, "resource.k8s.io/v1beta2"),
        ("1.37", False, OK, "resource.k8s.io/v1 "),
    ],
)
def test_doctor_says_whether_one_gpu_can_be_fenced(
    tmp_path: Path, release: str, gate: bool, status: str, says: str
) -> None:
    with running_sim(tmp_path, kubernetes_version=release, dra_device_taint_gate=gate) as sim:
        cfg = GpufleetConfig(kubeconfig=str(sim.sa_kubeconfig))
        checks = {c.name: c for c in kubernetes_checks(cfg, FENCE_POLICY)}
    dra = checks["dra"]
    assert (dra.status, checks["rbac"].status) == (status, OK), checks
    assert says in dra.detail
