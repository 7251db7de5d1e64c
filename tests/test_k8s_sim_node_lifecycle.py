"""Controllers writing node taints beside gpufleet: the node lifecycle controller's
`node.kubernetes.io/unschedulable` follows a cordon and `not-ready`/`unreachable` the Ready
condition, and a concurrent writer (a
node-problem-detector stand-in) toggles a taint of its own; gpufleet's taint writes and theirs
keep each other's taints."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client, config

from harness.k8s_sim import Sim, running_sim
from kube.actuator import KubeActuator
from remediations.capabilities import WriteContext
from remediations.types import QUARANTINE_TAINT, Intent
from simulator.node_lifecycle import (
    NOT_READY_TAINT,
    UNREACHABLE_TAINT,
    UNSCHEDULABLE_TAINT,
    WRITER_TAINT,
)

CTX = WriteContext(action_id="a1", incident_id="i1", playbook="quarantine", reason="test")


def _keys(sim: Sim, node: str) -> set[str]:
    obj = sim.cluster.store.get("nodes", "", node)
    assert obj is not None
    return {t["key"] for t in obj["spec"].get("taints") or []}


def test_cordon_brings_the_unschedulable_taint(tmp_path: Path) -> None:
    with running_sim(tmp_path) as sim:
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(sim.kubeconfig), client_configuration=cfg)
        with client.ApiClient(cfg) as api:
            core = client.CoreV1Api(api)
            core.patch_node("h100-0002", {"spec": {"unschedulable": True}})
            assert _keys(sim, "h100-0002") == {UNSCHEDULABLE_TAINT}
            core.patch_node("h100-0002", {"spec": {"unschedulable": False}})
            assert _keys(sim, "h100-0002") == set()


def test_gpufleet_and_a_concurrent_taint_writer_keep_each_others_taints(tmp_path: Path) -> None:
    with running_sim(tmp_path, taint_writer=1.0) as sim:
        act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig)
        try:
            sim.advance(2)  # the writer adds its taint
            assert _keys(sim, "h100-0003") == {WRITER_TAINT}
            taint = {"key": QUARANTINE_TAINT, "value": "gpu_xid", "effect": "NoSchedule"}
            act.apply(Intent("taint", "h100-0003", taint), CTX)
            assert _keys(sim, "h100-0003") == {WRITER_TAINT, QUARANTINE_TAINT}
            sim.advance(2)  # the writer takes its own away, gpufleet's stays
            assert _keys(sim, "h100-0003") == {QUARANTINE_TAINT}
            sim.advance(2)
            act.apply(Intent("untaint", "h100-0003", {"key": QUARANTINE_TAINT}), CTX)
            assert _keys(sim, "h100-0003") == {WRITER_TAINT}
        finally:
            act.close()


def _taints(core: client.CoreV1Api, node: str) -> dict[tuple[str, str], str | None]:
    """(key, effect) -> timeAdded of the node's taints, as a client reads them."""
    n = core.read_node(node)
    return {
        (t.key, t.effect): (t.time_added.isoformat() if t.time_added else None)
        for t in (n.spec.taints if n.spec else None) or []
    }


def test_not_ready_and_unreachable_taints_follow_the_ready_condition(tmp_path: Path) -> None:
    with running_sim(tmp_path) as sim:
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(sim.kubeconfig), client_configuration=cfg)
        with client.ApiClient(cfg) as api:
            core = client.CoreV1Api(api)
            sim.cluster.set_node_ready("h100-0001", False)
            got = _taints(core, "h100-0001")
            assert set(got) == {(NOT_READY_TAINT, "NoSchedule"), (NOT_READY_TAINT, "NoExecute")}
            assert got[(NOT_READY_TAINT, "NoExecute")] is not None  # timeAdded, for eviction
            sim.cluster.set_node_ready("h100-0001", None)  # the kubelet stopped posting
            assert set(_taints(core, "h100-0001")) == {
                (UNREACHABLE_TAINT, "NoSchedule"),
                (UNREACHABLE_TAINT, "NoExecute"),
            }
            # the default tolerations (300 s) keep the workload pods there meanwhile
            assert {p.key for p in sim.cluster.running_pods() if p.node == "h100-0001"}
            sim.cluster.set_node_ready("h100-0001", True)
            assert _taints(core, "h100-0001") == {}


def test_a_reboot_taints_the_node_not_ready_until_it_is_back(tmp_path: Path) -> None:
    """The reboot daemon writes NotReady itself; the controller's pass still taints the node."""
    with running_sim(tmp_path, reboot_seconds=60) as sim:
        node = "h100-0003"
        sim.cluster.repairs.sentinel.add(node)  # as a reboot sentinel Job leaves it
        sim.advance(1)
        assert _keys(sim, node) == {NOT_READY_TAINT}
        sim.advance(61)
        assert _keys(sim, node) == set()


def test_gpufleet_never_removes_or_brings_back_the_controllers_taints(tmp_path: Path) -> None:
    with running_sim(tmp_path) as sim:
        act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig)
        try:
            node = "h100-0003"
            sim.cluster.set_node_ready(node, None)
            taint = {"key": QUARANTINE_TAINT, "value": "gpu_xid", "effect": "NoSchedule"}
            act.apply(Intent("taint", node, taint), CTX)
            assert _keys(sim, node) == {UNREACHABLE_TAINT, QUARANTINE_TAINT}
            act.apply(Intent("untaint", node, {"key": QUARANTINE_TAINT}), CTX)
            assert _keys(sim, node) == {UNREACHABLE_TAINT}  # not removed with gpufleet's own
            act.apply(Intent("taint", node, taint), CTX)
            sim.cluster.set_node_ready(node, True)  # the controller takes unreachable away
            act.apply(Intent("untaint", node, {"key": QUARANTINE_TAINT}), CTX)
            assert _keys(sim, node) == set()  # and gpufleet's write does not bring it back
        finally:
            act.close()
