"""Gates one by one, and policy files that name the file, field path and expectation."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from errors import ConfigError
from remediations import gates
from remediations.cluster_view import ClusterView, NodeView, PodView
from remediations.gates import Fleet, Ledger, LedgerEntry, Outcome
from remediations.playbooks import Plan
from remediations.policy import (
    DEFAULT_POLICY,
    Attempts,
    BlastRadius,
    MaintenanceWindows,
    load_policy,
    policy_from_dict,
)
from remediations.store.records import EngineState
from remediations.types import Intent


def ts(s: str) -> float:
    return datetime.fromisoformat(s).replace(tzinfo=UTC).timestamp()


def _plan(*nodes: str, disruptive: bool = True) -> Plan:
    return Plan("drain", f"node/{nodes[0]}", (Intent("cordon", nodes[0]),), disruptive, nodes)


def _view(n_gpu: int, n_cpu: int = 0, down: tuple[str, ...] = ()) -> ClusterView:
    nodes = {
        f"g{i}": NodeView(
            f"g{i}", {"gpufleet.io/pool": "p"}, unschedulable=f"g{i}" in down, gpu_count=8
        )
        for i in range(n_gpu)
    }
    nodes.update({f"c{i}": NodeView(f"c{i}", unschedulable=True) for i in range(n_cpu)})
    return ClusterView(nodes)


def test_blast_radius_counts_gpu_nodes_only() -> None:
    br = BlastRadius(max_nodes=3, max_percent_of_pool=25)
    fleet = Fleet.of(_view(8, n_cpu=20, down=("g0",)), "gpufleet.io/pool")
    assert gates.blast_radius(br, _plan("g1"), fleet, Ledger()).ok  # 2/8 = 25 %
    held = Ledger.of([LedgerEntry("drain", "node/g1", 0.0, ("g1",), True)])
    r = gates.blast_radius(br, _plan("g2"), fleet, held)
    assert r.outcome is Outcome.WAIT and "3/8 GPU nodes of pool p" in r.reason
    assert gates.blast_radius(br, _plan("g0"), fleet, held).ok  # already down: no change
    assert gates.blast_radius(br, _plan("g3", disruptive=False), fleet, held).ok
    small = Fleet.of(_view(2), "gpufleet.io/pool")  # 10 % of 2 nodes still allows one
    assert gates.blast_radius(
        BlastRadius(max_nodes=2, max_percent_of_pool=10), _plan("g0"), small, Ledger()
    ).ok


def test_attempts_cooldown_then_escalate() -> None:
    a = Attempts(cooldown=600, max_attempts=2, window=3600)
    led = Ledger.of([LedgerEntry("restart_job", "job/x", 1000.0)])
    assert gates.attempts(a, "restart_job", "job/x", led, 1300.0).outcome is Outcome.WAIT
    assert gates.attempts(a, "restart_job", "job/x", led, 1700.0).ok
    assert gates.attempts(a, "restart_pod", "job/x", led, 1300.0).ok  # keyed by playbook too
    led = led.add(LedgerEntry("restart_job", "job/x", 1700.0))
    r = gates.attempts(a, "restart_job", "job/x", led, 2400.0)
    assert r.outcome is Outcome.ESCALATE and "escalate to a person" in r.reason
    assert gates.attempts(a, "restart_job", "job/x", led, 1000.0 + 3601 + 700).ok


def test_exponential_backoff_doubles_the_cooldown_per_attempt_up_to_its_cap() -> None:
    """After the n-th attempt in the window the next waits cooldown x 2^(n-1), capped; the
    fixed default keeps one cooldown however many attempts came before."""
    a = Attempts(cooldown=60, max_attempts=9, window=86400, backoff="exponential",
                 max_cooldown=300)  # fmt: skip
    led, at = Ledger(), 0.0
    waits = []
    for _ in range(5):
        led = led.add(LedgerEntry("reset_gpu", "gpu/x", at))
        w = next(
            s for s in range(1, 1000) if gates.attempts(a, "reset_gpu", "gpu/x", led, at + s).ok
        )
        r = gates.attempts(a, "reset_gpu", "gpu/x", led, at + w - 1)
        assert r.outcome is Outcome.WAIT and r.gate == "cooldown"
        waits.append(w)
        at += w
    assert waits == [60, 120, 240, 300, 300]
    assert "240s after the last attempt, backoff after 3 attempts" in gates.attempts(
        a, "reset_gpu", "gpu/x", Ledger.of([LedgerEntry("reset_gpu", "gpu/x", t) for t in
                                            (0.0, 60.0, 180.0)]), 200.0).reason  # fmt: skip
    fixed = Attempts(cooldown=60, max_attempts=9, window=86400)
    assert gates.attempts(fixed, "reset_gpu", "gpu/x", led, at + 60).ok


def test_rate_limit() -> None:
    led = Ledger.of([LedgerEntry("cordon", f"node/{i}", 100.0 + i) for i in range(5)])
    assert gates.rate(5, led, 200.0).outcome is Outcome.WAIT
    assert gates.rate(5, led, 3800.0).ok


def test_maintenance_windows_with_time_zone_and_midnight_wrap() -> None:
    mw = MaintenanceWindows.model_validate(
        {
            "applies_to": ["drain"],
            "windows": [
                {"days": ["fri"], "start": "22:00", "end": "06:00", "timezone": "Europe/Berlin"}
            ],
        }
    )
    # Friday 2026-11-27 21:30 UTC = 22:30 Berlin: inside
    assert gates.in_window(mw, "drain", ts("2026-11-27T21:30:00")).ok
    # Saturday 04:00 Berlin (03:00 UTC): still Friday's window
    assert gates.in_window(mw, "drain", ts("2026-11-28T03:00:00")).ok
    # Saturday 07:00 Berlin: outside
    assert gates.in_window(mw, "drain", ts("2026-11-28T06:00:00")).outcome is Outcome.WAIT
    # Thursday night: outside; other playbooks: not restricted
    assert not gates.in_window(mw, "drain", ts("2026-11-26T22:00:00")).ok
    assert gates.in_window(mw, "cordon", ts("2026-11-26T22:00:00")).ok


def test_protected_namespaces_labels_priority_classes() -> None:
    p = load_policy().gates.protected
    view = ClusterView(
        {
            "g0": NodeView("g0", {"gpufleet.io/protected": "true"}, gpu_count=8),
            "g1": NodeView("g1", gpu_count=8),
        },
        {"kube-system/x": PodView("kube-system", "x", "g1")},
    )
    assert gates.protected(p, _plan("g0"), view).outcome is Outcome.DENY
    plan = Plan("restart_pod", "pod/nvidia-gpu/x", (), False, (), ("nvidia-gpu",))
    assert "namespace nvidia-gpu is protected" in gates.protected(p, plan, view).reason
    plan = Plan("drain", "node/g1", (), True, ("g1",), ("ml",), ("system-node-critical",))
    assert gates.protected(p, plan, view).outcome is Outcome.DENY
    assert gates.protected(p, _plan("g1"), view).ok


def test_pause_breaker_evidence_freshness() -> None:
    assert gates.paused(EngineState("c", paused=True, paused_by="a")).outcome is Outcome.WAIT
    assert gates.breaker(EngineState("c", breaker_tripped=True)).outcome is Outcome.DENY
    assert gates.evidence("monitoring_gap").outcome is Outcome.DENY
    assert gates.freshness(100.0, 1000.0, 300.0, None).outcome is Outcome.DENY
    assert gates.freshness(900.0, 1000.0, 300.0, 950.0).outcome is Outcome.DENY
    assert gates.freshness(960.0, 1000.0, 300.0, 950.0).ok


def test_shipped_policies_load() -> None:
    for f in DEFAULT_POLICY.parent.glob("*.yaml"):
        assert load_policy(f).rules


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "rules:\n  - {name: a, playbook: drain, mode: sometimes, match: {kinds: [gpu_xid]}}\n",
            "rules[0].mode: expected input should be 'auto', 'approval' or 'notify'",
        ),
        (
            "rules:\n  - {name: a, playbook: dran, mode: auto, match: {kinds: [gpu_xid]}}\n",
            "rules[0].playbook: expected one of cordon",
        ),
        (
            "rules:\n  - {name: a, playbook: drain, mode: auto, match: {kinds: [gpu_xid]},"
            " params: {timeout: 0}}\n",
            "rules[0].params.timeout: expected input should be greater",
        ),
        (
            "rules:\n  - {name: a, playbook: drain, mode: auto, match: {kinds: [gpu_xid]},"
            " params: {timout: 5m}}\n",
            "rules[0].params.timout: unknown field",
        ),
        (
            "gates:\n  maintenance:\n    windows: [{timezone: Mars/Olympus}]\n",
            "gates.maintenance.windows[0].timezone: expected an IANA time zone",
        ),
        ("gates: {blast_radius: {max_nodes: -1}}\n", "gates.blast_radius.max_nodes"),
        # the quiet before a return is fleet time, never a count of cycles
        (
            "gates: {return_quiet: 3 cycles}\n",
            "gates.return_quiet: expected a duration like '30s', '5m' or '2h' (got '3 cycles')",
        ),
        ("gates: {return_quiet: -90}\n", "gates.return_quiet: expected a non-negative duration"),
        # the retry backoff: a known shape, and a cap no shorter than the cooldown it grows from
        (
            "gates: {attempts: {backoff: linear}}\n",
            "gates.attempts.backoff: expected input should be 'fixed' or 'exponential'",
        ),
        (
            "gates: {attempts: {cooldown: 10m, max_cooldown: 1m}}\n",
            "gates.attempts.max_cooldown: expected a duration no shorter than cooldown (600s)",
        ),
        (
            "gates: {attempts: {max_cooldown: soon}}\n",
            "gates.attempts.max_cooldown: expected a duration like '30s'",
        ),
        (
            "rules:\n  - {name: a, playbook: mark_replacement, mode: auto,"
            " match: {kinds: [gpu_xid]}}\n",
            "rules[0].playbook: expected one of cordon",
        ),
    ],
)
def test_bad_policy_names_file_field_and_expectation(
    tmp_path: Path, text: str, expected: str
) -> None:
    f = tmp_path / "policy.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_policy(f)
    msg = str(info.value)
    assert msg.startswith(str(f)) and expected in msg, msg


def test_policy_from_dict_defaults_are_conservative() -> None:
    p = policy_from_dict({})
    assert p.rules == [] and p.gates.blast_radius.max_nodes == 2
