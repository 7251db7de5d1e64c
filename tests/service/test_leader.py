"""Leader election rules, on the simulator's real Lease API with the real client and a manual
clock: acquire, renew, no takeover of a live lease, takeover of an expired one, the old leader
stops acting before a standby may take over, release hands over at once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.service.kube_lease import KubeLeaseClient
from gpufleet.service.leader import LeaderElector
from remediations.kube_jobs import api_client
from tests.k8s_sim_support import Sim, running_sim


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(tmp_path) as s:
        yield s


def test_lease_rules(sim: Sim) -> None:
    now = [1000.0]
    clients = [KubeLeaseClient(api_client(sim.kubeconfig), "gpufleet", "lead") for _ in "ab"]
    try:
        a, b = (
            LeaderElector(c, name, lease_duration=10, renew_every=2, wall=lambda: now[0])
            for c, name in zip(clients, "ab", strict=True)
        )
        assert a.try_once() and a.is_leader()
        assert not b.try_once() and not b.is_leader()  # a live lease is not taken
        now[0] += 6
        assert a.try_once()  # renewed
        now[0] += 9
        assert not b.try_once()  # renewed 9 s ago, duration 10: still a's
        assert not a.is_leader()  # but a, unable to renew for 9 s > 10 - 2, no longer acts
        now[0] += 2
        assert b.try_once() and b.is_leader()  # expired: b takes over
        lease = clients[0].get()
        assert lease is not None and lease.holder == "b" and lease.transitions == 1
        assert not a.try_once()
        b.release()
        assert not b.is_leader()
        assert a.try_once() and a.is_leader()  # released: no need to wait for expiry
    finally:
        for c in clients:
            c.close()
