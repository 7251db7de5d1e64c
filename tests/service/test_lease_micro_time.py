"""The leader Lease's times go out as MicroTime (six fractional digits), which a real API server
requires: a whole-second time serialised by the client's `isoformat()` has no fraction and is
refused with 400, so leadership could never be taken at a whole second."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.k8s_sim import Sim, running_sim
from kube.jobs import api_client
from kube.lease import KubeLeaseClient, LeaseState

MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(tmp_path) as s:
        yield s


def test_whole_second_lease_times_are_written_as_micro_time(sim: Sim) -> None:
    lease = KubeLeaseClient(api_client(sim.sa_kubeconfig), "gpufleet", "lead")
    try:
        created = lease.create(LeaseState("a", 15.0, 1_700_000_000.0, 1_700_000_000.0, 0))
        assert created is not None
        stored = sim.cluster.store.get("leases", "gpufleet", "lead")
        assert stored is not None
        assert MICRO.match(stored["spec"]["renewTime"]), stored["spec"]
        assert stored["spec"]["renewTime"] == "2023-11-14T22:13:20.000000Z"
        got = lease.get()
        assert got is not None and got.renewed == 1_700_000_000.0 and got.holder == "a"
        renewed = lease.replace(
            LeaseState("a", 15.0, 1_700_000_000.0, 1_700_000_002.5, 0, got.resource_version)
        )
        assert renewed is not None
        got = lease.get()
        assert got is not None and got.renewed == 1_700_000_002.5
    finally:
        lease.close()
