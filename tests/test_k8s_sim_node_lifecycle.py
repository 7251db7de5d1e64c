"""Controllers writing node taints beside gpufleet: the node lifecycle controller's
`node.kubernetes.io/unschedulable` follows a cordon, and a concurrent writer (a
node-problem-detector stand-in) toggles a taint of its own; gpufleet's taint writes and theirs
keep each other's taints."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client, config

from remediations.actuator_api import WriteContext
from remediations.kube_actuator import KubeActuator
from remediations.types import QUARANTINE_TAINT, Intent
from simulator.node_lifecycle import UNSCHEDULABLE_TAINT, WRITER_TAINT
from tests.k8s_sim_support import Sim, running_sim

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
