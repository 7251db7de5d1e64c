"""A cluster whose jobs carry only a label of their own (`service.source.job_label_keys`): the
detectors' snapshot and the actuator's reads group the same pods into the same job, so a
migrate planned on the snapshot pins and verifies exactly that job's pods."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gpufleet.config import GpufleetConfig
from gpufleet.service.assembly import build
from gpufleet.service.runtime import ServiceParts
from gpufleet.service.sources import source_settings
from harness.k8s_sim import small_scenario
from kube.actuator import KubeActuator
from kube.jobs import api_client
from observer.scrape.collector import ScrapeSettings
from observer.snapshot.job_identity import DEFAULT_JOB_LABEL_KEYS
from remediations.playbooks.base import Plan, Subject
from remediations.playbooks.drain import DrainParams, Migrate
from remediations.policy import load_policy
from remediations.store import Store
from remediations.types import IncidentId
from simulator.serve import SimulationHandle, start_simulation

CUSTOM = "team.example.com/run"
NODE = "h100-0000"  # both ranks of `train` (harness.k8s_sim)


def relabel_train(kubeconfig: Path) -> list[str]:
    """`ml/train`'s pods labelled with CUSTOM only (every built-in job-name label removed)."""
    api = api_client(str(kubeconfig))
    try:
        core = client.CoreV1Api(api)
        names = []
        for p in core.list_namespaced_pod("ml").items:
            meta = p.metadata
            assert meta is not None and meta.name is not None
            labels = meta.labels or {}
            if any(labels.get(k) == "train" for k in DEFAULT_JOB_LABEL_KEYS):
                patch = {k: None for k in DEFAULT_JOB_LABEL_KEYS if k in labels}
                body = {"metadata": {"labels": {**patch, CUSTOM: "train"}}}
                core.patch_namespaced_pod(meta.name, "ml", body)
                names.append(f"ml/{meta.name}")
        return sorted(names)
    finally:
        api.close()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[SimulationHandle, list[str]]]:
    sc = small_scenario().model_copy(update={"start": float(int(time.time()))})
    handle = start_simulation(sc, kubeconfig_out=tmp_path / "kubeconfig")
    try:
        assert handle.kubeconfig is not None
        train = relabel_train(handle.kubeconfig)
        assert len(train) == 2, train
        yield handle, train
    finally:
        handle.stop()


def built(
    handle: SimulationHandle, tmp_path: Path, keys: list[str] | None, route: str = "config"
) -> ServiceParts:
    """The service as `build` assembles it, the keys in the config's `service.source` or (route
    "settings") only in the collector settings handed to `build`."""
    source: dict[str, Any] = {"discovery_url": f"{handle.metrics_url}/targets"}
    if keys is not None and route == "config":
        source["job_label_keys"] = keys
    config = {
        "cluster": handle.scenario.cluster,
        "store_url": f"sqlite:///{tmp_path / 'j.db'}",
        "service": {"http": {"port": 0}, "source": source},
    }
    cfg = GpufleetConfig.model_validate(config)
    settings = source_settings(cfg.service.source, cfg.cluster)
    assert isinstance(settings, ScrapeSettings)
    if keys is not None and route == "settings":
        settings = replace(settings, job_label_keys=tuple(keys))
    parts, _ = build(
        cfg, load_policy(None), "job-label-test",
        store=Store.open(cfg.store_url, cluster=cfg.cluster),
        kubeconfig=str(handle.kubeconfig), scrape=settings, clock=time.time, interval=5.0,
    )  # fmt: skip
    return parts


def close(parts: ServiceParts) -> None:
    parts.cycle.close(5.0)
    for c in reversed(parts.closers):
        c()
    parts.telemetry.close()


def migrate_train(parts: ServiceParts) -> tuple[Plan, list[str]]:
    """A cycle, then a migrate of `ml/train` off NODE planned on its snapshot's view, and the
    pods the actuator pins for it (what it would evict)."""
    report = parts.live.run_once(time.time())
    assert report.ok, report.errors
    view = parts.live.views.built
    assert view is not None
    subject = Subject(IncidentId("i"), "straggler", "warning", "slow", node=NODE, job="ml/train")
    plan = Migrate().plan(subject, view, DrainParams())
    assert isinstance(plan, Plan), plan
    actuator = parts.cycle.actuator
    assert isinstance(actuator, KubeActuator)
    evict = next(i for i in plan.intents if i.op == "evict_pods")
    pinned = actuator.pin(evict).args["pods"]
    return plan, sorted(f"{ns}/{name}" for ns, name, _uid in pinned)


@pytest.mark.slow
@pytest.mark.parametrize("route", ["config", "settings"])
def test_a_custom_job_label_is_one_job_for_detectors_and_actuator(
    fleet: tuple[SimulationHandle, list[str]], tmp_path: Path, route: str
) -> None:
    handle, train = fleet
    parts = built(handle, tmp_path, [CUSTOM], route)
    try:
        plan, pinned = migrate_train(parts)
        view = parts.live.views.built
        assert view is not None and sorted(view.jobs["ml/train"].pods) == train
        evict = next(i for i in plan.intents if i.op == "evict_pods")
        assert evict.args["selector"] == f"{CUSTOM}=train"
        assert pinned == train  # the actuator moves the job the detectors saw, whole
        actuator = parts.cycle.actuator
        assert isinstance(actuator, KubeActuator)
        live = actuator.cluster_view()
        assert sorted(live.jobs["ml/train"].pods) == train
        assert {p.job for p in actuator.pods_on_node(NODE) if p.key in train} == {"ml/train"}
    finally:
        close(parts)


@pytest.mark.slow
def test_without_the_key_configured_the_custom_label_names_no_job(
    fleet: tuple[SimulationHandle, list[str]], tmp_path: Path
) -> None:
    """The default keys are unchanged: a label they do not know groups nothing, anywhere."""
    handle, _train = fleet
    parts = built(handle, tmp_path, None)
    try:
        assert parts.live.run_once(time.time()).ok
        view = parts.live.views.built
        assert view is not None and "ml/train" not in view.jobs
        actuator = parts.cycle.actuator
        assert isinstance(actuator, KubeActuator)
        assert actuator.job_label_keys == DEFAULT_JOB_LABEL_KEYS
        assert "ml/train" not in actuator.cluster_view().jobs
    finally:
        close(parts)
