"""`gpufleet actions|pause|resume|breaker|audit` on a real journal (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gpufleet.cli import main
from remediations.decision_journal import RemediationEngine
from remediations.store import Store
from remediations.types import ActionState
from tests.remediations.fake_cluster import FakeCluster
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
    eng = RemediationEngine(live_policy(), store, started_at=now - 60)
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
    assert main(["actions", "show", waiting[0].id, "--config", cfg]) == 0
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
