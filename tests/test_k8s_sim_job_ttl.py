"""The simulated cluster's TTL-after-finished controller: a finished Job with
`ttlSecondsAfterFinished` is deleted that long after it finished, as on a real cluster (gpufleet's
node Jobs set one day), and a Job without it stays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client, config

from harness.k8s_sim import running_sim


def _job(name: str, **spec: Any) -> Any:
    pod = {"restartPolicy": "Never", "nodeName": "h100-0003",
           "containers": [{"name": "diag", "image": "dcgm"}]}  # fmt: skip
    return {"metadata": {"name": name}, "spec": {"template": {"spec": pod}, **spec}}


def test_finished_jobs_go_after_their_ttl(tmp_path: Path) -> None:
    with running_sim(tmp_path) as sim:
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(sim.kubeconfig), client_configuration=cfg)
        with client.ApiClient(cfg) as api:
            batch = client.BatchV1Api(api)
            batch.create_namespaced_job("gpufleet", _job("ttl", ttlSecondsAfterFinished=600))
            batch.create_namespaced_job("gpufleet", _job("keep"))
            took = sim.cluster.scenario.diagnostic_seconds
            for _ in range(3):
                sim.advance(took)
            done = batch.read_namespaced_job("ttl", "gpufleet").status
            assert done is not None and done.succeeded == 1
            sim.advance(300)
            assert sim.cluster.store.get("jobs", "gpufleet", "ttl") is not None
            sim.advance(400)
            assert sim.cluster.store.get("jobs", "gpufleet", "ttl") is None
            assert sim.cluster.store.get("jobs", "gpufleet", "keep") is not None
