"""Leader election rules, on the simulator's real Lease API with the real client and a manual
clock: acquire, renew, no takeover of a live lease, takeover of an expired one, the old leader
stops acting before a standby may take over, release hands over at once; a standby measures
the leader's silence on its own clock, so a holder whose clock is skewed either way is neither
taken over while it renews nor waited on forever once it stops."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.service.leader import LeaderElector
from harness.k8s_sim import Sim, running_sim
from kube.jobs import api_client
from kube.lease import KubeLeaseClient


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(tmp_path) as s:
        yield s


def test_lease_rules(sim: Sim) -> None:
    now = [1000.0]
    clients = [KubeLeaseClient(api_client(sim.sa_kubeconfig), "gpufleet", "lead") for _ in "ab"]
    try:
        a, b = (
            LeaderElector(c, name, lease_duration=10, renew_every=2, wall=lambda: now[0])
            for c, name in zip(clients, "ab", strict=True)
        )
        assert a.try_once() and a.is_leader()
        assert not b.try_once() and not b.is_leader()  # a live lease is not taken
        now[0] += 6
        assert a.try_once()  # renewed
        assert not b.try_once()  # b sees the renewal now, on its own clock
        now[0] += 9
        assert not b.try_once()  # unchanged for 9 s of b's clock, duration 10: still a's
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


@pytest.mark.parametrize("skew", [-3600.0, 3600.0])
def test_a_standby_judges_the_holder_by_its_own_clock(sim: Sim, skew: float) -> None:
    """The holder's clock is an hour behind (its renewTime looks long expired) or an hour ahead
    (its renewTime looks an hour in the future): the standby takes over exactly when the
    record stopped changing for a Lease duration of its own time."""
    now = [1000.0]
    clients = [KubeLeaseClient(api_client(sim.kubeconfig), "gpufleet", "lead") for _ in "ab"]
    try:
        a = LeaderElector(clients[0], "a", lease_duration=10, renew_every=2,
                          wall=lambda: now[0] + skew)  # fmt: skip
        b = LeaderElector(clients[1], "b", lease_duration=10, renew_every=2, wall=lambda: now[0])
        assert a.try_once()
        for _ in range(10):  # a renews every 2 s: b never takes a live lease
            assert not b.try_once()
            now[0] += 2
            assert a.try_once()
        assert a.is_leader() and not b.is_leader()
        assert not b.try_once()  # b saw a's last renewal now; then a dies (kill -9)
        now[0] += 9
        assert not b.try_once()
        now[0] += 1
        assert b.try_once() and b.is_leader()  # 10 s of b's clock without a change
    finally:
        for c in clients:
            c.close()
