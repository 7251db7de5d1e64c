"""One journal per cluster: the first start records the configured `cluster` name with the
cluster's kube-system UID; a second cluster configured with the same name on the same database
is refused before anything runs, with an error that says what to change."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from gpufleet.cli import main
from gpufleet.config import GpufleetConfig
from gpufleet.service.assembly import build
from gpufleet.service.cluster_claim import recorded
from harness.k8s_sim import running_sim
from observer.scrape.collector import ScrapeSettings
from remediations.policy import load_policy
from remediations.store import Store

pytestmark = pytest.mark.slow


def test_a_cluster_name_belongs_to_one_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store_url = f"sqlite:///{tmp_path / 'shared.db'}"
    with running_sim(tmp_path / "east", cluster="east") as east, \
            running_sim(tmp_path / "west", cluster="west") as west:  # fmt: skip
        east_uid = east.cluster.get("namespaces", "", "kube-system")["metadata"]["uid"]
        west_uid = west.cluster.get("namespaces", "", "kube-system")["metadata"]["uid"]
        assert east_uid != west_uid

        # The east cluster's service starts first and records `default` as its own.
        cfg = GpufleetConfig.model_validate(
            {"store_url": store_url, "service": {"http": {"port": 0}}}
        )
        store = Store.open(store_url, cluster=cfg.cluster)
        parts, _ = build(
            cfg, load_policy(None), "east-0", store=store, kubeconfig=str(east.kubeconfig),
            scrape=ScrapeSettings(targets=("http://127.0.0.1:9/metrics",)),
            clock=time.time, interval=30.0,
        )  # fmt: skip
        parts.loop.close(5.0)
        for close in reversed(parts.closers):
            close()
        parts.telemetry.close()
        store = Store.open(store_url, cluster="default")
        first = recorded(store)
        store.close()
        assert first is not None and first.kube_system_uid == east_uid
        assert first.recorded_by == "east-0"

        # The west cluster, left with the shipped name on the same database: refused, exit 2.
        config = {
            "store_url": store_url,
            "kubeconfig": str(west.kubeconfig),
            "service": {"http": {"port": 0}, "source": {"targets": ["http://127.0.0.1:9/m"]}},
        }
        f = tmp_path / "west.yaml"
        f.write_text(yaml.safe_dump(config))
        assert main(["run", "--config", str(f)]) == 2
        err = capsys.readouterr().err
        assert f"{f}: cluster:" in err and "belongs to another Kubernetes cluster" in err
        assert east_uid in err and west_uid in err and "own `cluster:` name" in err
        store = Store.open(store_url, cluster="default")
        assert recorded(store) == first  # nothing changed
        assert store.audit_log() == []  # and nothing ran
        store.close()
