"""Shadow mode (issue 11): a fresh install decides, gates and journals what it would do, and
writes nothing to Kubernetes until the policy says `actuation: live` (globally or per rule).

Runs the shipped default policy through the real `kubernetes` client against the simulator's
Kubernetes API; every write request the API server receives is counted by a pass-through fault
rule (status 0 serves the request normally), so "nothing written" is checked on the wire.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.cli import main
from harness.fake_cluster import FakeCluster
from harness.k8s_sim import Sim, running_sim, spec
from kube.actuator import KubeActuator
from remediations.cycle import RemediationCycle
from remediations.decision_journal import DecisionJournal
from remediations.policy import DEFAULT_POLICY, Policy, load_policy, policy_from_dict
from remediations.store import Store
from remediations.types import ActionState, Actuation
from simulator.kube_api.faults import FaultRule
from tests.remediations.helpers import finding, live_policy

T0 = 1_700_000_000.0
WRITES = ("POST", "PUT", "PATCH", "DELETE")


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    with running_sim(tmp_path, history=5000) as s:
        yield s


@pytest.fixture
def actuator(sim: Sim) -> Iterator[KubeActuator]:
    act = KubeActuator.from_kubeconfig(sim.sa_kubeconfig, clock=lambda: 0.0, sleep=sim.advance)
    yield act
    act.close()


def _write_counters(sim: Sim) -> list[FaultRule]:
    """Pass-through rules that count every write request the simulated API server receives."""
    return [sim.api.faults.add(r".*", status=0, count=-1, method=m) for m in WRITES]


def _cycles(loop: RemediationCycle, node: str, n: int = 4) -> None:
    for i in range(n):
        t = T0 + 30 * i
        loop.tick([finding(node=node, gpu="GPU-2", first_seen=T0, last_seen=t)], t)


def test_fresh_install_writes_nothing_and_journals_what_it_would_do(
    sim: Sim, actuator: KubeActuator, store: Store, tmp_path: Path
) -> None:
    policy = load_policy()  # the shipped default, as a fresh install has it
    assert policy.actuation is Actuation.SHADOW
    counters = _write_counters(sim)
    rv = sim.cluster.store.resource_version
    loop = RemediationCycle(policy, store, actuator, "fresh", started_at=T0 - 60)
    _cycles(loop, "h100-0002")

    assert [c.hits for c in counters] == [0, 0, 0, 0]
    assert sim.cluster.store.resource_version == rv
    node = actuator.core.read_node("h100-0002")
    assert not spec(node).unschedulable and not spec(node).taints
    by_playbook = {a.playbook: a for a in store.actions()}
    q, d = by_playbook["quarantine"], by_playbook["drain"]
    assert q.state is ActionState.SHADOW and d.state is ActionState.SHADOW
    assert q.result.startswith("shadow: would quarantine node/h100-0002 (cordon h100-0002")
    assert d.result.startswith("shadow: would ask a person to approve drain on node/h100-0002")
    assert len(store.actions()) == 2  # journaled once, not once per cycle
    audit = [r.message for r in store.audit_log()]
    assert any(m.startswith("shadow: would quarantine") for m in audit), audit
    assert not [r for r in store.audit_log() if r.kind == "k8s_write"]
    with pytest.raises(ValueError, match="shadow mode"):
        loop.engine.approve(d.id, "alice", T0 + 200)


def test_actions_list_and_audit_say_shadow_would(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store.open(store_url, cluster="shadow-cli")
    engine = DecisionJournal(load_policy(), store, started_at=T0 - 60)
    engine.cycle([finding(node="a-0001", first_seen=T0)], FakeCluster({"a": 10}).view(T0), T0)
    store.close()
    cfg = tmp_path / "gpufleet.yaml"
    cfg.write_text(f"store_url: '{store_url}'\ncluster: shadow-cli\n")
    assert main(["actions", "list", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "shadow: would quarantine node/a-0001" in out
    assert "shadow: would ask a person to approve drain" in out
    assert main(["audit", "--config", str(cfg)]) == 0
    assert "shadow: would quarantine node/a-0001" in capsys.readouterr().out
    ident = next(line.split()[0] for line in out.splitlines() if "drain" in line)
    assert main(["actions", "approve", ident, "--config", str(cfg)]) == 1
    assert "shadow mode" in capsys.readouterr().err


def _rules(quarantine: str | None, top: str | None) -> Policy:
    rule: dict[str, object] = {
        "name": "q",
        "match": {"kinds": ["gpu_xid"]},
        "playbook": "quarantine",
        "mode": "auto",
    }
    if quarantine is not None:
        rule["actuation"] = quarantine
    body: dict[str, object] = {"hysteresis": {"open_after": 1}, "rules": [rule]}
    if top is not None:
        body["actuation"] = top
    return policy_from_dict(body)


@pytest.mark.parametrize(
    ("rule", "top", "writes"),
    [(None, None, False), ("live", None, True), ("shadow", "live", False), (None, "live", True)],
)
def test_rule_actuation_overrides_the_policy(
    sim: Sim, actuator: KubeActuator, store: Store, rule: str | None, top: str | None, writes: bool
) -> None:
    counters = _write_counters(sim)
    loop = RemediationCycle(_rules(rule, top), store, actuator, "o", started_at=T0 - 60)
    _cycles(loop, "h100-0003", n=2)
    (a,) = store.actions()
    assert (sum(c.hits for c in counters) > 0) is writes
    assert (a.state is ActionState.DONE) is writes
    assert (a.state is ActionState.SHADOW) is not writes
    assert bool(spec(actuator.core.read_node("h100-0003")).unschedulable) is writes


def test_forced_shadow_writes_nothing_even_with_a_live_policy(
    sim: Sim, actuator: KubeActuator, store: Store
) -> None:
    counters = _write_counters(sim)
    loop = RemediationCycle(live_policy(), store, actuator, "f", started_at=T0 - 60, shadow=True)
    _cycles(loop, "h100-0002")
    assert sum(c.hits for c in counters) == 0
    assert {a.state for a in store.actions()} == {ActionState.SHADOW}


def _cli_policy(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    f = tmp_path / "policy.yaml"
    f.write_text(text)
    cfg = tmp_path / "gpufleet.yaml"
    cfg.write_text(f"store_url: 'sqlite:///{tmp_path / 'j.db'}'\n")
    code = main(["actions", "list", "--config", str(cfg), "--policy", str(f)])
    return code, capsys.readouterr().err


RULE = "rules:\n  - {name: q, match: {kinds: [gpu_xid]}, playbook: quarantine, mode: auto%s}\n"


def test_policy_errors_name_file_field_and_expected_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _cli_policy(tmp_path, "actuation: on\n" + RULE % "", capsys)
    assert code == 2 and "policy.yaml" in err and "actuation:" in err, err
    assert "'shadow'" in err and "'live'" in err
    code, err = _cli_policy(tmp_path, RULE % ", actuation: yes-please", capsys)
    assert code == 2 and "rules[0].actuation:" in err and "'shadow'" in err, err
    code, err = _cli_policy(tmp_path, "dry_run: maybe\n" + RULE % "", capsys)
    assert code == 2 and "dry_run: expected true or false" in err, err
    code, err = _cli_policy(tmp_path, "dry_run: true\nactuation: live\n" + RULE % "", capsys)
    assert code == 2 and "contradicts `actuation: live`" in err and "remove dry_run" in err, err


def test_deprecated_dry_run_maps_onto_actuation_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    f = tmp_path / "old.yaml"
    f.write_text("dry_run: false\n" + RULE % "")
    with caplog.at_level(logging.WARNING):
        assert load_policy(f).actuation is Actuation.LIVE
    assert f"{f}: dry_run is deprecated" in caplog.text and "actuation: live" in caplog.text
    f.write_text("dry_run: true\n" + RULE % "")
    assert load_policy(f).actuation is Actuation.SHADOW
    f.write_text(RULE % "")
    assert load_policy(f).actuation is Actuation.SHADOW  # a file that does not say: shadow


def test_every_shipped_policy_is_shadow() -> None:
    for f in DEFAULT_POLICY.parent.glob("*.yaml"):
        p = load_policy(f)
        assert p.actuation is Actuation.SHADOW and not p.live_anywhere, f
