"""gpufleet's taint writes never drop a taint another controller adds at the same moment.

The node lifecycle controller, the autoscaler and node-problem-detector write `spec.taints` (an
atomic list) beside gpufleet. Here another writer adds a taint of its own while gpufleet's PATCH
is in flight (the server holds it back): the write carries the resourceVersion
it was computed from, gets 409, re-reads and keeps both taints. Without the precondition the
other writer's taint is silently lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client, config, watch

from harness.k8s_sim import Sim, running_sim, spec
from kube.actuator import KubeActuator
from remediations.capabilities import WriteContext
from remediations.types import QUARANTINE_TAINT, Intent
from simulator.node_lifecycle import UNREACHABLE_TAINT

NODE = "h100-0003"
OTHER = {"key": "example.com/kernel-deadlock", "effect": "NoSchedule"}
"""What node-problem-detector might add while gpufleet writes."""
CTX = WriteContext(action_id="a1", incident_id="i1", playbook="quarantine", reason="test")


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(tmp_path) as s:
        yield s


def _taints(sim: Sim) -> set[tuple[str, str]]:
    node = sim.cluster.store.get("nodes", "", NODE)
    assert node is not None
    return {(t["key"], t["effect"]) for t in node["spec"].get("taints") or []}


def _add_other(sim: Sim) -> None:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(sim.kubeconfig), client_configuration=cfg)
    with client.ApiClient(cfg) as admin:  # the other controller, with its own read
        core = client.CoreV1Api(admin)
        have = spec(core.read_node(NODE)).taints or []
        taints = [core.api_client.sanitize_for_serialization(x) for x in have]
        core.patch_node(NODE, {"spec": {"taints": [*taints, OTHER]}})


def _race(sim: Sim, intent: Intent, during: Callable[[Sim], None] = _add_other) -> str:
    """Run `intent` while another writer (by default: adding OTHER) writes during gpufleet's
    PATCH."""
    rule = sim.api.faults.add(rf"^/api/v1/nodes/{NODE}$", 0, count=1, delay=1.0, method="PATCH")
    act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig)
    out: list[str] = []
    t = threading.Thread(target=lambda: out.append(act.apply(intent, CTX)))
    t.start()
    try:
        deadline = time.monotonic() + 10
        while rule.hits == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert rule.hits == 1, "gpufleet's PATCH never reached the server"
        during(sim)
        t.join(timeout=30)
    finally:
        act.close()
    assert out, "the intent did not finish"
    return out[0]


def test_taint_keeps_a_taint_added_during_the_write(sim: Sim) -> None:
    intent = Intent("taint", NODE, {"key": QUARANTINE_TAINT, "value": "gpu_xid",
                                    "effect": "NoSchedule"})  # fmt: skip
    assert _race(sim, intent).startswith("tainted")
    assert _taints(sim) == {(QUARANTINE_TAINT, "NoSchedule"), (OTHER["key"], "NoSchedule")}


def _quarantine(sim: Sim) -> None:
    """gpufleet's quarantine taint on NODE, written without a race."""
    act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig)
    try:
        act.apply(Intent("taint", NODE, {"key": QUARANTINE_TAINT, "value": "x",
                                         "effect": "NoSchedule"}), CTX)  # fmt: skip
    finally:
        act.close()


def test_untaint_keeps_a_taint_added_during_the_write(sim: Sim) -> None:
    _quarantine(sim)
    assert _race(sim, Intent("untaint", NODE, {"key": QUARANTINE_TAINT})).startswith("removed")
    assert _taints(sim) == {(OTHER["key"], "NoSchedule")}


def test_untaint_never_brings_back_an_unreachable_taint_the_controller_removed(sim: Sim) -> None:
    """The node comes back Ready while gpufleet's PATCH is in flight: the node lifecycle
    controller removes `unreachable` (NoSchedule and NoExecute). A list computed before that and
    written blindly would put `unreachable:NoExecute` back, if only until the controller's next
    pass, and the taint eviction controller acts on it; with the precondition no version of
    the node after the Ready one carries it (the watch shows every version)."""
    sim.cluster.set_node_ready(NODE, None)
    _quarantine(sim)
    assert (UNREACHABLE_TAINT, "NoExecute") in _taints(sim)
    since = sim.cluster.store.get("nodes", "", NODE)
    assert since is not None
    rv = since["metadata"]["resourceVersion"]
    back = Intent("untaint", NODE, {"key": QUARANTINE_TAINT})
    assert _race(sim, back, lambda s: s.cluster.set_node_ready(NODE, True)).startswith("removed")
    assert _taints(sim) == set()
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(sim.kubeconfig), client_configuration=cfg)
    with client.ApiClient(cfg) as admin:
        versions = [
            {(t.key, t.effect) for t in (spec(ev["object"]).taints or [])}
            for ev in watch.Watch().stream(
                client.CoreV1Api(admin).list_node,
                field_selector=f"metadata.name={NODE}",
                resource_version=rv,
                timeout_seconds=1,
            )
        ]
    ready_at = next(i for i, v in enumerate(versions) if (UNREACHABLE_TAINT, "NoExecute") not in v)
    assert all((UNREACHABLE_TAINT, "NoExecute") not in v for v in versions[ready_at:]), versions
