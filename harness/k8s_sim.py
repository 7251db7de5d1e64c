"""A small simulated cluster behind the simulated Kubernetes API, for the k8s simulator tests.

Four 8-GPU H100 nodes: `train` (2 ranks x 4 GPUs, both on h100-0000, PDB maxUnavailable 1),
`serve` (2 inference pods x 2 GPUs on h100-0001), `big` (1 rank x 8 GPUs on h100-0002), and
h100-0003 empty. The wall clock is manual, so pod start-up (30 scenario seconds) happens only
when a test advances it.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import yaml
from kubernetes.client import V1ObjectMeta

from simulator.clock import ManualWall, SimClock
from simulator.cluster import ClusterOptions, SimCluster
from simulator.kube_api.rbac import Rbac
from simulator.kube_api.server import KubeApiServer
from simulator.scenario import Scenario, scenario_from_dict

KUBE_FLEET: dict[str, Any] = {
    "name": "k8s-small",
    "seed": 1,
    "cluster": "small",
    "duration": "2h",
    "pools": [{"name": "h100", "model": "H100", "nodes": 4, "gpus_per_node": 8}],
    "workloads": [
        {"name": "train", "kind": "training", "namespace": "ml", "pool": "h100", "replicas": 2,
         "gpus_per_pod": 4, "steps_metric": True},
        {"name": "serve", "kind": "inference", "namespace": "serving", "pool": "h100",
         "replicas": 2, "gpus_per_pod": 2},
        {"name": "big", "kind": "training", "namespace": "ml", "pool": "h100", "replicas": 1,
         "gpus_per_pod": 8, "job_label": "jobset.sigs.k8s.io/jobset-name"},
    ],
}  # fmt: skip
"""The fleet behind the simulated Kubernetes API (the module docstring says where each pod runs)."""


def small_scenario(**extra: Any) -> Scenario:
    """The small fleet, with extra top-level fields (e.g. `faults=[...]`)."""
    return scenario_from_dict({**KUBE_FLEET, **extra}, "k8s-small")


DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
SERVICE_ACCOUNT = ("gpufleet", "gpufleet")
"""gpufleet's ServiceAccount in deploy/base (namespace, name): what the service runs as."""


@functools.cache
def deploy_rbac(kustomization: str = "base") -> Rbac:
    """The Roles, ClusterRoles and bindings of deploy/, rendered by the real `kubectl kustomize`
    (so namespaces are those a `kubectl apply -k` would create)."""
    exe = shutil.which("kubectl") or str(Path(sys.executable).with_name("kubectl"))
    out = subprocess.run(
        [exe, "kustomize", str(DEPLOY / kustomization)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return Rbac(d for d in yaml.safe_load_all(out.stdout) if d)


@dataclass
class Sim:
    cluster: SimCluster
    api: KubeApiServer
    wall: ManualWall
    kubeconfig: Path
    """The cluster admin's kubeconfig: what a test uses to set up and inspect the cluster."""
    sa_kubeconfig: Path
    """gpufleet's ServiceAccount (deploy/ RBAC): what the product under test runs as."""

    def advance(self, seconds: float) -> None:
        """Move wall (and so scenario) time on, then let the cluster catch up."""
        self.wall.advance(seconds)
        self.cluster.tick()

    def node_of(self, namespace: str, name: str) -> str | None:
        pod = self.cluster.store.get("pods", namespace, name)
        return None if pod is None else pod["spec"].get("nodeName")


@contextmanager
def running_sim(
    tmp_path: Path,
    *,
    history: int = 2000,
    startup: float = 30.0,
    termination: float = 0.0,
    dra: bool = True,
    taint_writer: float = 0.0,
    **extra: Any,
) -> Iterator[Sim]:
    """`dra=False`: a device-plugin cluster (no ResourceSlices, no DeviceTaintRules);
    `taint_writer` > 0: another controller toggles a taint on every node that often."""
    sc = small_scenario(**extra)
    wall = ManualWall(time.time())
    clock = SimClock(sc.start, wall=wall)
    options = ClusterOptions(
        startup_seconds=startup,
        history=history,
        termination_seconds=termination,
        dra=dra,
        taint_writer_seconds=taint_writer,
    )
    cluster = SimCluster(sc, clock=clock, options=options)
    api = KubeApiServer(cluster, bookmark_interval=0.2, rbac=deploy_rbac()).start()
    try:
        yield Sim(
            cluster,
            api,
            wall,
            api.write_kubeconfig(tmp_path / "kubeconfig"),
            api.service_account_kubeconfig(tmp_path / "sa-kubeconfig", *SERVICE_ACCOUNT),
        )
    finally:
        api.stop()


def exporter_gpus(sim: Sim, node: str) -> tuple[dict[str, str], tuple[str, ...]]:
    """(GPU UUID -> `namespace/pod`, every GPU UUID) as the node's simulated dcgm-exporter page
    labels them (`UUID`, `pod`, `namespace`): the collectors' pod-to-GPU mapping."""
    from observer.scrape.exposition import parse_page
    from simulator.engine import FleetSimulator
    from simulator.metrics_server import LiveMetrics

    metrics = LiveMetrics(FleetSimulator(sim.cluster.scenario, sim.cluster.layout), sim.cluster)
    page = parse_page(metrics.node_page(node) or "")
    pod_of_gpu = {
        uuid: f"{labels['namespace']}/{labels['pod']}"
        for uuid, labels in page.identity.items()
        if labels.get("pod")
    }
    return pod_of_gpu, tuple(sorted(page.identity))


# ---- the `kubernetes` client's models make every field optional; these narrow them in tests ----

T = TypeVar("T")
M_co = TypeVar("M_co", covariant=True)
S_co = TypeVar("S_co", covariant=True)


def present(value: T | None, what: str) -> T:
    """`value`, or fail the test: the API server left out `what`, which the test relies on."""
    assert value is not None, f"the API response has no {what}"
    return value


class _HasMetadata(Protocol[M_co]):
    @property
    def metadata(self) -> M_co | None: ...


class _HasSpec(Protocol[S_co]):
    @property
    def spec(self) -> S_co | None: ...


class _HasStatus(Protocol[S_co]):
    @property
    def status(self) -> S_co | None: ...


def meta(obj: _HasMetadata[M_co]) -> M_co:
    """An object's `metadata` (V1ObjectMeta), or a list's (V1ListMeta)."""
    return present(obj.metadata, f"{type(obj).__name__}.metadata")


def spec(obj: _HasSpec[S_co]) -> S_co:
    return present(obj.spec, f"{type(obj).__name__}.spec")


def status(obj: _HasStatus[S_co]) -> S_co:
    return present(obj.status, f"{type(obj).__name__}.status")


def name_of(obj: _HasMetadata[V1ObjectMeta]) -> str:
    return present(meta(obj).name, f"{type(obj).__name__}.metadata.name")


def labels_of(obj: _HasMetadata[V1ObjectMeta]) -> dict[str, str]:
    return present(meta(obj).labels, f"{type(obj).__name__}.metadata.labels")


def annotations_of(obj: _HasMetadata[V1ObjectMeta]) -> dict[str, str]:
    return present(meta(obj).annotations, f"{type(obj).__name__}.metadata.annotations")
