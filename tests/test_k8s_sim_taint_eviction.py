"""The taint manager evicts pods from a not-ready or unreachable node once their
`tolerationSeconds` (300 s by default) have run out on fleet time, as a real cluster does; and
gpufleet, draining that node at the same moment, neither counts those evictions as its own nor
removes the controller's taints."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kubernetes import client, config

from errors import TemporaryError
from harness.k8s_sim import Sim, meta, running_sim
from kube.actuator import KubeActuator
from remediations.capabilities import WriteContext
from remediations.types import Intent
from simulator.node_lifecycle import NOT_READY_TAINT, UNREACHABLE_TAINT

NODE = "h100-0001"
CTX = WriteContext(action_id="a1", incident_id="i1", playbook="drain", reason="test")


@contextmanager
def _core(sim: Sim) -> Iterator[client.CoreV1Api]:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(sim.kubeconfig), client_configuration=cfg)
    with client.ApiClient(cfg) as api:
        yield client.CoreV1Api(api)


def _pods(core: client.CoreV1Api, node: str = NODE) -> dict[str, str]:
    """`namespace/name` -> UID of the pods bound to the node, as the client lists them."""
    got = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
    return {f"{meta(p).namespace}/{meta(p).name}": str(meta(p).uid) for p in got}


def _workload(pods: dict[str, str]) -> set[str]:
    return {k for k in pods if k.split("/")[0] in ("ml", "serving")}


def _taint_keys(core: client.CoreV1Api, node: str = NODE) -> set[tuple[str, str]]:
    n = core.read_node(node)
    return {(t.key, t.effect) for t in (n.spec.taints if n.spec else None) or []}


def _evictions(core: client.CoreV1Api) -> set[str]:
    evs = core.list_event_for_all_namespaces().items
    return {
        f"{e.involved_object.namespace}/{e.involved_object.name}"
        for e in evs
        if e.reason == "TaintManagerEviction"
    }


def test_unreachable_node_keeps_its_pods_for_their_toleration_seconds_then_evicts(
    tmp_path: Path,
) -> None:
    with running_sim(tmp_path) as sim, _core(sim) as core:
        before = _pods(core)
        workload = _workload(before)
        assert workload, before
        sim.cluster.set_node_ready(NODE, None)  # the kubelet stopped posting
        sim.advance(299)
        assert _workload(_pods(core)) == workload  # the default 300 s still holds them
        assert not _evictions(core)
        sim.advance(2)
        after = _pods(core)
        assert not _workload(after)  # evicted by the taint manager, on fleet time
        assert _evictions(core) == workload
        # pods tolerating the taint without a limit (the exporter DaemonSet's) stay
        assert set(after) == set(before) - workload
        assert (UNREACHABLE_TAINT, "NoExecute") in _taint_keys(core)


def test_not_ready_counts_from_the_taints_time_added(tmp_path: Path) -> None:
    with running_sim(tmp_path) as sim, _core(sim) as core:
        workload = _workload(_pods(core))
        sim.cluster.set_node_ready(NODE, False)
        sim.advance(200)
        sim.cluster.set_node_ready(NODE, True)  # back in time: nothing evicted
        sim.advance(200)
        assert _workload(_pods(core)) == workload
        sim.cluster.set_node_ready(NODE, False)  # a new taint, a new 300 s
        sim.advance(200)
        assert _workload(_pods(core)) == workload
        sim.advance(101)
        assert not _workload(_pods(core))
        assert (NOT_READY_TAINT, "NoExecute") in _taint_keys(core)


def test_a_drain_on_a_node_gone_unreachable_counts_only_its_own_evictions(
    tmp_path: Path,
) -> None:
    with running_sim(tmp_path) as sim, _core(sim) as core:
        act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig)
        try:
            pods = _pods(core)
            first, *rest = sorted(_workload(pods))
            assert rest
            assert act.apply(Intent("cordon", NODE), CTX) == "cordoned"
            one = [[*first.split("/"), pods[first]]]
            out = act.apply(Intent("evict_pods", NODE, {"pods": one}), CTX)
            assert out == f"evicted 1 pod(s) from {NODE}"
            sim.cluster.set_node_ready(NODE, None)  # unreachable mid-drain
            sim.advance(301)  # the taint manager evicts the rest
            others = [[*k.split("/"), pods[k]] for k in rest]
            out = act.apply(Intent("evict_pods", NODE, {"pods": others}), CTX)
            assert out == f"evicted 0 pod(s) from {NODE}; {len(rest)} already gone or going"
            assert _evictions(core) == set(rest)
            want = {(UNREACHABLE_TAINT, "NoSchedule"), (UNREACHABLE_TAINT, "NoExecute")}
            assert want <= _taint_keys(core)
            # returning the node to service leaves the controller's taints to the controller
            assert act.apply(Intent("uncordon", NODE), CTX) == "uncordoned"
            assert _taint_keys(core) == want
            sim.cluster.set_node_ready(NODE, True)
            assert _taint_keys(core) == set()
        finally:
            act.close()


def test_a_long_reboot_keeps_the_daemon_pods_and_gpufleet_leaves_the_taints(
    tmp_path: Path,
) -> None:
    """A reboot that outlasts 300 s of NotReady: the reboot takes the workload pods, the taint
    manager leaves the DaemonSet pods (they tolerate it for ever); waiting for the reboot
    touches no taint, and the controller takes not-ready away once the node is back."""
    with running_sim(tmp_path, reboot_seconds=400) as sim, _core(sim) as core:
        act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig)
        try:
            daemons = set(_pods(core)) - _workload(_pods(core))
            assert daemons
            out = act.apply(Intent("mark_reboot", NODE, {}), CTX)
            assert out.startswith(f"marked {NODE}"), out
            sim.advance(1)
            sim.advance(301)
            assert set(_pods(core)) == daemons
            assert not _evictions(core)
            with pytest.raises(TemporaryError, match="waiting for"):
                act.apply(Intent("await_reboot", NODE, {}), CTX)
            want = {(NOT_READY_TAINT, "NoSchedule"), (NOT_READY_TAINT, "NoExecute")}
            assert _taint_keys(core) == want
            sim.advance(100)
            assert "marker removed" in act.apply(Intent("await_reboot", NODE, {}), CTX)
            assert _taint_keys(core) == set()
        finally:
            act.close()
