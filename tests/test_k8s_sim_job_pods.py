"""The simulated Job controller runs each Job's pod, as a client sees through the real
`kubernetes` client: Running on the pinned node while the Job is active, then Succeeded, or
Failed with the container's termination message (the only place a real cluster keeps why: the
Job's Failed condition says the backoff limit was reached), and gone with its Job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client, config

from harness.k8s_sim import running_sim
from simulator.job_pods import BACKOFF_LIMIT_REACHED

NS = "gpufleet"


def _job(name: str, node: str) -> Any:
    container = {"name": "diag", "image": "dcgm", "command": ["dcgmi", "diag"]}
    pod = {"restartPolicy": "Never", "nodeName": node, "containers": [container]}
    return {"metadata": {"name": name}, "spec": {"template": {"spec": pod}}}


def _pods(core: client.CoreV1Api, job: str) -> list[client.V1Pod]:
    sel = f"batch.kubernetes.io/job-name={job}"
    return list(core.list_namespaced_pod(NS, label_selector=sel).items)


def test_a_jobs_pod_runs_then_keeps_the_containers_termination_message(tmp_path: Path) -> None:
    with running_sim(tmp_path, diagnostics={"h100-0001": "fail"}) as sim:
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(sim.kubeconfig), client_configuration=cfg)
        with client.ApiClient(cfg) as api:
            batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
            batch.create_namespaced_job(NS, _job("diag-ok", "h100-0003"))
            batch.create_namespaced_job(NS, _job("diag-bad", "h100-0001"))
            sim.advance(1)
            (running,) = _pods(core, "diag-bad")
            assert running.spec is not None and running.spec.node_name == "h100-0001"
            assert running.status is not None and running.status.phase == "Running"
            owner = (running.metadata.owner_references or [])[0] if running.metadata else None
            assert owner is not None and (owner.kind, owner.name) == ("Job", "diag-bad")
            for _ in range(3):
                sim.advance(sim.cluster.scenario.diagnostic_seconds)
            (ok,) = _pods(core, "diag-ok")
            assert ok.status is not None and ok.status.phase == "Succeeded"
            (bad,) = _pods(core, "diag-bad")
            assert bad.status is not None and bad.status.phase == "Failed"
            (c,) = bad.status.container_statuses or []
            term = c.state.terminated if c.state is not None else None
            assert term is not None and term.exit_code != 0 and term.reason == "Error"
            assert term.message == "diagnostics failed"
            job = batch.read_namespaced_job("diag-bad", NS)
            conds = job.status.conditions if job.status is not None else None
            assert [x.message for x in conds or []][-1] == BACKOFF_LIMIT_REACHED
            batch.delete_namespaced_job("diag-bad", NS, propagation_policy="Background")
            sim.advance(1)
            assert _pods(core, "diag-bad") == []  # the garbage collector took its pod
            assert len(_pods(core, "diag-ok")) == 1


def test_a_node_running_a_jobs_pod_reboots_when_marked(tmp_path: Path) -> None:
    """The reboot daemon takes a node's pods down; a Job's pod among them (it has a uid like
    every pod) no longer fails the PATCH that asked for the reboot."""
    with running_sim(tmp_path, reboot_seconds=60) as sim:
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(sim.kubeconfig), client_configuration=cfg)
        with client.ApiClient(cfg) as api:
            batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
            batch.create_namespaced_job(NS, _job("diag", "h100-0003"))
            sim.advance(1)
            (pod,) = _pods(core, "diag")
            assert pod.metadata is not None and pod.metadata.uid
            node = core.read_node("h100-0003")
            boot = node.status.node_info.boot_id if node.status and node.status.node_info else ""
            marker = {"metadata": {"annotations": {"gpufleet.io/reboot-required": f"a:{boot}"}}}
            core.patch_node("h100-0003", marker)
            sim.advance(1)
            node = core.read_node("h100-0003")
            status = node.status
            ready = [c for c in (status.conditions if status else None) or [] if c.type == "Ready"]
            assert ready and ready[0].status == "False", ready
            sim.advance(60)
            node = core.read_node("h100-0003")
            info = node.status.node_info if node.status else None
            assert info is not None and info.boot_id != boot
