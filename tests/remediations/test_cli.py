"""`gpufleet actions|pause|resume|breaker|audit` on a real journal (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from detectors.findings import FindingKind, Severity
from gpufleet.cli import main
from harness.fake_cluster import FakeCluster
from remediations.decision_journal import DecisionJournal
from remediations.store import Store
from remediations.types import ActionState
from tests.remediations.helpers import finding, live_policy


def _config(tmp_path: Path, url: str, **extra: str) -> Path:
    cfg = tmp_path / "gpufleet.yaml"
    lines = [f"store_url: '{url}'", "cluster: cli-test", *(f"{k}: {v}" for k, v in extra.items())]
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


def test_approve_reject_pause_breaker_audit(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    store = Store.open(store_url, cluster="cli-test")
    eng = DecisionJournal(live_policy(), store, started_at=now - 60)
    cluster = FakeCluster({"a": 10})
    eng.cycle(
        [
            finding(node="a-0001", gpu="G1", first_seen=now),
            finding(node="a-0002", gpu="G2", first_seen=now),
        ],
        cluster.view(now),
        now,
    )
    waiting = store.actions([ActionState.AWAITING_APPROVAL])
    assert len(waiting) == 2
    cfg = str(_config(tmp_path, store_url))

    assert main(["actions", "list", "--config", cfg]) == 0
    out = capsys.readouterr().out
    assert "awaiting_approval" in out and "drain" in out

    assert main(["actions", "approve", waiting[0].id[:10], "--by", "alice", "--config", cfg]) == 0
    assert "approved by alice" in capsys.readouterr().out
    assert (
        main(
            ["actions", "reject", waiting[1].id, "--by", "bob", "--reason", "busy", "--config", cfg]
        )
        == 0
    )
    assert main(["actions", "approve", waiting[1].id, "--config", cfg]) == 1  # not awaiting
    assert main(["actions", "show", "nope", "--config", cfg]) == 1
    capsys.readouterr()
    assert main(["actions", "show", waiting[0].id[:8], "--config", cfg]) == 0
    readable = capsys.readouterr().out
    assert "  state:       approved" in readable and "approved by: alice" in readable
    assert "UTC (" in readable and "ago)" in readable  # times with their age
    node = waiting[0].target.removeprefix("node/")
    assert f"plan:\n  1. [ next] cordon {node}" in readable
    assert "approval    alice" in readable  # the audit trail, in order
    assert main(["actions", "show", waiting[0].id, "--json", "--config", cfg]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["state"] == "approved" and shown["approved_by"] == "alice"
    assert any(r["kind"] == "approval" for r in shown["audit"])

    assert main(["pause", "--reason", "review", "--by", "carol", "--config", cfg]) == 0
    assert Store.open(store_url, cluster="cli-test").engine_state().paused
    assert main(["resume", "--config", cfg]) == 0
    store.trip_breaker("test", now)
    assert main(["breaker", "status", "--config", cfg]) == 0
    assert "TRIPPED" in capsys.readouterr().out
    assert main(["breaker", "reset", "--by", "dave", "--config", cfg]) == 0
    assert not store.engine_state().breaker_tripped

    capsys.readouterr()
    assert main(["audit", "--since", "1h", "--format", "jsonl", "--config", cfg]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    kinds = {r["kind"] for r in rows}
    assert {"decision", "approval", "control", "breaker"} <= kinds
    assert any(r["actor"] == "alice" for r in rows) and any(r["actor"] == "dave" for r in rows)
    assert main(["audit", "--format", "table", "--config", cfg]) == 0
    assert "approved by alice" in capsys.readouterr().out
    store.close()


def test_bad_policy_and_config_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "policy.yaml"
    bad.write_text(
        "rules:\n  - {name: a, playbook: drain, mode: maybe, match: {kinds: [gpu_xid]}}\n"
    )
    cfg = _config(tmp_path, f"sqlite:///{tmp_path / 'j.db'}")
    assert main(["actions", "list", "--config", str(cfg), "--policy", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "rules[0].mode" in err and "'auto'" in err
    cfg2 = tmp_path / "bad-config.yaml"
    cfg2.write_text("store_url: mysql://x\nclustr: a\n")
    assert main(["pause", "--config", str(cfg2)]) == 2
    err = capsys.readouterr().err
    assert "store_url: expected a SQLAlchemy URL" in err and "clustr: unknown field" in err
    assert main(["audit", "--since", "yesterday-ish", "--config", str(cfg)]) == 2
    # the config's own policy path is relative to the config file
    cfg3 = _config(tmp_path, f"sqlite:///{tmp_path / 'j.db'}", policy="policy.yaml")
    assert main(["breaker", "status", "--config", str(cfg3)]) == 2
    assert "rules[0].mode" in capsys.readouterr().err


def test_incidents_list_worst_first_and_show(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    store = Store.open(store_url, cluster="cli-test")
    eng = DecisionJournal(live_policy(), store, started_at=now - 60)
    found = [
        finding(node="a-0001", gpu="G1", first_seen=now - 30, severity=Severity.WARNING),
        finding(node="a-0002", gpu="G2", first_seen=now),
    ]
    for t in (now - 60, now - 30, now):  # a warning opens an incident after a few cycles
        eng.cycle(found, FakeCluster({"a": 10}).view(t), t)
    cfg = str(_config(tmp_path, store_url))

    assert main(["incidents", "list", "--config", cfg]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["ID", "SEVERITY", "STATUS"]
    assert [line.split()[1] for line in lines[1:]] == ["critical", "warning"]  # worst first
    assert "a-0002" in lines[1] and "ago" in lines[1]
    ident = lines[1].split()[0]
    assert main(["incidents", "show", ident, "--config", cfg]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"incident {ident}") and "  node:          a-0002" in out
    assert "what happened:" in out and "decision" in out
    assert main(["incidents", "show", ident, "--json", "--config", cfg]) == 0
    raw = json.loads(capsys.readouterr().out)
    assert raw["node"] == "a-0002" and raw["audit"]
    assert main(["incidents", "show", "zzz", "--config", cfg]) == 1


def test_config_is_found_from_the_environment_then_the_working_directory(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db = tmp_path / "j.db"
    Store.open(f"sqlite:///{db}", cluster="cli-test").close()
    here = tmp_path / "work"
    (here / ".gpufleet").mkdir(parents=True)
    _config(here / ".gpufleet", f"sqlite:///{db}").rename(here / ".gpufleet" / "config.yaml")
    monkeypatch.chdir(here)
    monkeypatch.delenv("GPUFLEET_CONFIG", raising=False)
    assert main(["incidents", "list"]) == 0  # ./.gpufleet/config.yaml
    assert "no open incidents" in capsys.readouterr().out

    # GPUFLEET_CONFIG wins over the working directory; a journal that does not exist is
    # refused with the file and field named, instead of a new empty one listing nothing.
    other = _config(tmp_path, f"sqlite:///{tmp_path / 'missing.db'}")
    monkeypatch.setenv("GPUFLEET_CONFIG", str(other))
    assert main(["actions", "list"]) == 2
    err = capsys.readouterr().err
    assert f"{other}: store_url: no journal at {tmp_path / 'missing.db'}" in err
    assert not (tmp_path / "missing.db").exists()
    assert (
        main(["audit", "--config", str(here / ".gpufleet" / "config.yaml")]) == 0
    )  # --config first


def test_a_notify_only_rule_reads_as_notify_only_not_as_a_denied_cordon(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shipped policy's throttle-notify rule (playbook cordon, mode notify) refused nothing:
    `incidents show` and `audit` say it only notifies, never "cordon ... deny"."""
    now = time.time()
    store = Store.open(store_url, cluster="cli-test")
    eng = DecisionJournal(live_policy(), store, started_at=now - 60)
    hot = finding(FindingKind.GPU_THROTTLE, Severity.WARNING, node="a-0003", first_seen=now - 60)
    for t in (now - 60, now - 30, now):
        eng.cycle([hot], FakeCluster({"a": 10}).view(t), t)
    cfg = str(_config(tmp_path, store_url))
    assert main(["incidents", "list", "--config", cfg]) == 0
    ident = capsys.readouterr().out.splitlines()[1].split()[0]

    assert main(["incidents", "show", ident, "--config", cfg]) == 0
    shown = capsys.readouterr().out
    assert "node/a-0003: rule throttle-notify only notifies; no action taken" in shown, shown
    assert "deny" not in shown
    assert main(["audit", "--config", cfg]) == 0
    audit = capsys.readouterr().out
    assert "rule throttle-notify only notifies; no action taken" in audit, audit
    assert "cordon on node/a-0003: deny" not in audit
