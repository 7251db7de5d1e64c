"""Two PodDisruptionBudgets over one pod: the eviction API answers 500 on every attempt (it does
not support a pod with several budgets), so a drain stops at once with a permanent failure that
tells a person what to fix, instead of retrying on every pass and never draining."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from harness.k8s_sim import Sim, running_sim
from kube.actuator import KubeActuator
from remediations.decision_journal import DecisionJournal
from remediations.executor import Executor
from remediations.store import Store
from remediations.types import ActionState
from tests.remediations.helpers import finding, live_policy

T0 = 1_700_000_000.0


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(tmp_path, history=5000) as s:
        yield s


def test_overlapping_budgets_fail_the_drain_for_a_person(sim: Sim, store: Store) -> None:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(sim.kubeconfig), client_configuration=cfg)
    with client.ApiClient(cfg) as admin:  # someone adds a second budget over ml/train's ranks
        pdb: Any = {
            "metadata": {"name": "train-extra"},
            "spec": {
                "minAvailable": 1,
                "selector": {"matchLabels": {"training.kubeflow.org/job-name": "train"}},
            },
        }
        client.PolicyV1Api(admin).create_namespaced_pod_disruption_budget("ml", pdb)
    policy = live_policy({
        "hysteresis": {"open_after": 1},
        "gates": {"blast_radius": {"max_nodes": 3, "max_percent_of_pool": 100}},
        "rules": [{"name": "drain", "match": {"kinds": ["gpu_xid"]}, "playbook": "drain",
                   "mode": "auto", "params": {"timeout": "10m", "backoff_initial": "5s"}}],
    })  # fmt: skip
    clock = [0.0]

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig, clock=lambda: clock[0], sleep=sleep)
    try:
        eng = DecisionJournal(policy, store, started_at=T0 - 60)
        eng.cycle([finding(node="h100-0000", first_seen=T0)], act.cluster_view(T0), T0)
        Executor(policy, store, act, "t").run(act.cluster_view(T0), T0 + 1)
    finally:
        act.close()
    (a,) = store.actions()
    assert a.state is ActionState.FAILED, a
    assert "more than one PodDisruptionBudget" in a.result and "a person must" in a.result
    assert clock[0] == 0.0  # no back-off: the refusal is not retried
    assert sim.node_of("ml", "train-worker-0") == "h100-0000"
